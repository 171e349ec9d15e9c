//! The validated name of the schema that holds skiplock's tables.

use std::fmt;

use crate::error::{Error, Result};

/// The schema every skiplock object lives in unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "skiplock";

/// The longest schema name accepted. PostgreSQL truncates identifiers to 63 bytes without
/// saying so; the notification channel is `<schema>.jobs`, so the schema gets 58.
pub const MAX_SCHEMA_LEN: usize = 58;

impl Schema {
    /// The schema every skiplock object lives in unless told otherwise: `skiplock`.
    pub const DEFAULT: &'static str = DEFAULT_SCHEMA;
    /// The longest schema name accepted (58: PostgreSQL truncates identifiers to 63 bytes,
    /// and the notification channel is `<schema>.jobs`).
    pub const MAX_LEN: usize = MAX_SCHEMA_LEN;
}

/// A schema name that has been validated: 1 to 58 characters from `[A-Za-z0-9_.-]`, not
/// starting with `pg_` (reserved by PostgreSQL). It is always sent double-quoted, so case is
/// kept exactly.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Schema {
    name: String,
    quoted: String,
    channel: String,
}

impl Schema {
    /// Validates `name`. Refuses anything outside the rule above, before any SQL runs.
    pub fn new(name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid("schema name", "it is empty"));
        }
        if name.len() > MAX_SCHEMA_LEN {
            return Err(Error::invalid(
                "schema name",
                format!(
                    "it is {} bytes long; the limit is {MAX_SCHEMA_LEN}",
                    name.len()
                ),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(Error::invalid(
                "schema name",
                format!("{c:?} is not allowed; use letters, digits, '_', '.' and '-'"),
            ));
        }
        if name.to_ascii_lowercase().starts_with("pg_") {
            return Err(Error::invalid(
                "schema name",
                "names starting with 'pg_' are reserved by PostgreSQL",
            ));
        }
        Ok(Schema {
            name: name.to_owned(),
            quoted: format!("\"{name}\""),
            channel: format!("{name}.jobs"),
        })
    }

    /// The name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a quoted SQL identifier, ready to splice into a statement.
    pub fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The LISTEN/NOTIFY channel of this schema's jobs table: `<schema>.jobs`. Each
    /// notification's payload is the name of the queue that received jobs.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The channel as a quoted identifier, for `LISTEN`.
    pub fn channel_quoted(&self) -> String {
        format!("\"{}\"", self.channel)
    }

    /// A statement template rendered for this schema, as skiplock renders the files of its
    /// own `queries/`: `{schema}` becomes the quoted name ([`Schema::quoted`]); full-line
    /// `--` comments and blank lines are dropped, so that they are not sent with every call.
    /// For crates that keep their own statements in files beside skiplock's; parameters are
    /// still bound, never spliced.
    ///
    /// ```
    /// let schema = skiplock::Schema::new("My-App")?;
    /// let template = "-- The oldest job.\nSELECT id\n\n  FROM {schema}.jobs ORDER BY id LIMIT 1";
    /// assert_eq!(
    ///     schema.render(template),
    ///     "SELECT id\n  FROM \"My-App\".jobs ORDER BY id LIMIT 1"
    /// );
    /// # Ok::<(), skiplock::Error>(())
    /// ```
    pub fn render(&self, template: &str) -> String {
        template
            .lines()
            .filter(|l| {
                let t = l.trim_start();
                !(t.is_empty() || t.starts_with("--"))
            })
            .collect::<Vec<_>>()
            .join("\n")
            .replace("{schema}", &self.quoted)
    }
}

impl Default for Schema {
    fn default() -> Self {
        Schema {
            name: DEFAULT_SCHEMA.to_owned(),
            quoted: format!("\"{DEFAULT_SCHEMA}\""),
            channel: format!("{DEFAULT_SCHEMA}.jobs"),
        }
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schema({:?})", self.name)
    }
}

impl std::str::FromStr for Schema {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Schema::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names() {
        for ok in [
            "skiplock",
            "app_jobs",
            "Tenant-1.jobs",
            "x",
            &"a".repeat(58),
        ] {
            let s = Schema::new(ok).unwrap();
            assert_eq!(s.quoted(), format!("\"{ok}\""));
        }
    }

    #[test]
    fn render_quotes_the_schema_and_drops_comments_and_blank_lines() {
        let s = Schema::new("Tenant-1.jobs").unwrap();
        let sql = s.render(
            "-- A comment, {schema} in it too.\n\
             SELECT count(*)\n\
             \n   \n\
             \x20   -- an indented comment\n\
             \x20 FROM {schema}.jobs -- a comment at a line's end is kept\n\
             \x20WHERE queue = $1",
        );
        assert_eq!(
            sql,
            "SELECT count(*)\n  FROM \"Tenant-1.jobs\".jobs -- a comment at a line's end is kept\n WHERE queue = $1"
        );
    }

    #[test]
    fn render_leaves_a_template_without_the_schema_as_it_is() {
        let s = Schema::new("x").unwrap();
        assert_eq!(
            s.render("SELECT pg_notification_queue_usage()\nLIMIT 1\n"),
            "SELECT pg_notification_queue_usage()\nLIMIT 1"
        );
        assert_eq!(s.render("-- only a comment\n\n"), "");
        assert_eq!(s.render(""), "");
    }

    #[test]
    fn refuses_injection_and_odd_names() {
        for bad in [
            "",
            "evil\"; DROP SCHEMA public CASCADE;--",
            "a$$b",
            "o'brien",
            "a\\b",
            "new\nline",
            "nul\0",
            "space name",
            "pg_catalog",
            "PG_x",
            "é",
            &"a".repeat(59),
        ] {
            let err = Schema::new(bad).unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?} -> {err}");
            assert!(!err.to_string().contains('\n'));
        }
    }
}
