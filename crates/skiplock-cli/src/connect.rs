//! The database and schema a command works on, and how a URL is shown.

use anyhow::Context as _;
use skiplock::Client;

use crate::database;
use crate::errors::usage;

/// The database and schema a command works on.
pub struct Target {
    pub url: Option<String>,
    pub schema: String,
    pub server_timeouts: bool,
}

impl Target {
    /// The URL: the given one, or the embedded default's (created, started and migrated on
    /// first use). An empty one (`--database-url ''`, `DATABASE_URL=` set but empty) is
    /// refused: it is a mistake, never a request for the embedded database.
    pub async fn url(&self) -> anyhow::Result<String> {
        match self.url.as_deref() {
            Some(u) if u.trim().is_empty() => Err(usage(
                "the database URL is empty (--database-url or DATABASE_URL); give a \
                 postgres:// URL, or leave both unset for the embedded database",
            )),
            Some(u) => Ok(u.to_owned()),
            None => {
                let url = tokio::task::spawn_blocking(|| database::resolve(None))
                    .await
                    .context("the embedded database task failed")??;
                Ok(url)
            }
        }
    }

    /// A client on the target. On the embedded default the schema is migrated first, so
    /// that a new user can start with any command.
    pub async fn client(&self, pool_size: usize) -> anyhow::Result<Client> {
        self.client_with(pool_size, true).await
    }

    /// A client on the target with named prepared statements on or off.
    pub async fn client_prepared(
        &self,
        pool_size: usize,
        prepared: bool,
    ) -> anyhow::Result<Client> {
        self.build(pool_size, true, prepared).await
    }

    /// A client on the target, migrating the embedded default only if `auto_migrate`.
    pub async fn client_with(
        &self,
        pool_size: usize,
        auto_migrate: bool,
    ) -> anyhow::Result<Client> {
        self.build(pool_size, auto_migrate, false).await
    }

    async fn build(
        &self,
        pool_size: usize,
        auto_migrate: bool,
        prepared: bool,
    ) -> anyhow::Result<Client> {
        let url = self.url().await?;
        let embedded = self.url.is_none();
        let client = Client::builder(url)
            .schema(&self.schema)
            .pool_size(pool_size.max(1))
            .application_name("skiplock-cli")
            .server_timeouts(self.server_timeouts.then(skiplock::ServerTimeouts::default))
            .prepared_statements(prepared)
            .build()?;
        // On the embedded default, the default schema migrates itself on first use (so that a
        // new user can start with any command); any other schema must exist already, so that
        // a typo in --schema creates nothing. `migrate` alone creates a schema.
        if embedded && auto_migrate {
            if self.schema == skiplock::Schema::DEFAULT {
                client.migrate().await?;
            } else if !client.is_migrated().await? {
                return Err(missing_schema(&self.schema));
            }
        }
        Ok(client)
    }
}

/// The refusal of a schema that does not exist (exit status 2), naming `migrate`.
pub fn missing_schema(schema: &str) -> anyhow::Error {
    usage(format!(
        "schema {schema} has no skiplock tables; run `skiplock --schema {schema} migrate` first \
         (only migrate creates a schema)"
    ))
}

/// The URL with its password hidden.
pub fn redact(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let auth_end = rest.find('@');
        let path_start = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = auth_end.filter(|at| *at < path_start) {
            let auth = &rest[..at];
            if let Some(colon) = auth.find(':') {
                return format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &auth[..colon],
                    &rest[at..]
                );
            }
        }
        return url.to_owned();
    }
    // key=value form
    url.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redact("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(
            redact("host=db password=s3cret user=app"),
            "host=db password=*** user=app"
        );
    }
}
