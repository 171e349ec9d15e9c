//! Enqueueing, operator actions and migrations through the caller's own connection or
//! transaction.

mod sealed {
    pub trait Sealed {}
}

/// A connection or transaction of the caller's that skiplock can run a statement through:
/// [`Client::enqueue_tx`](crate::Client::enqueue_tx),
/// [`Client::enqueue_many_tx`](crate::Client::enqueue_many_tx),
/// [`Client::enqueue_workflow_tx`](crate::Client::enqueue_workflow_tx),
/// [`JobContext::complete_tx`](crate::JobContext::complete_tx),
/// [`Client::retry_tx`](crate::Client::retry_tx),
/// [`Client::cancel_tx`](crate::Client::cancel_tx),
/// [`Client::delete_tx`](crate::Client::delete_tx),
/// [`Client::pause_queue_tx`](crate::Client::pause_queue_tx),
/// [`Client::resume_queue_tx`](crate::Client::resume_queue_tx) and
/// [`Client::migrate_tx`](crate::Client::migrate_tx).
///
/// Through a transaction, the change (and its notification) takes effect only if and when
/// that transaction commits; a rollback leaves no trace of it.
///
/// Implemented for:
/// - `&tokio_postgres::Client` and `&tokio_postgres::Transaction`,
/// - `&deadpool_postgres::Client` (a pool object) and `&deadpool_postgres::Transaction`,
/// - with the `sqlx-0_8` feature, `&mut sqlx::PgConnection` (pass `&mut *tx` for a
///   `sqlx::Transaction`) and `&mut sqlx::Transaction<'_, Postgres>`.
///
/// The trait is sealed: it cannot be implemented outside this crate.
pub trait Executor<'c>: sealed::Sealed + Send {
    #[doc(hidden)]
    fn into_conn(self) -> Conn<'c>;
}

/// The connection behind an [`Executor`]. Not part of the public API.
#[doc(hidden)]
#[non_exhaustive]
pub enum Conn<'c> {
    TokioClient(&'c tokio_postgres::Client),
    TokioTx(&'c tokio_postgres::Transaction<'c>),
    #[cfg(feature = "sqlx-0_8")]
    Sqlx(&'c mut sqlx::PgConnection),
}

impl Conn<'_> {
    /// The same connection, borrowed for one statement (so that a call can run several).
    pub(crate) fn reborrow(&mut self) -> Conn<'_> {
        match self {
            Conn::TokioClient(c) => Conn::TokioClient(c),
            Conn::TokioTx(t) => Conn::TokioTx(t),
            #[cfg(feature = "sqlx-0_8")]
            Conn::Sqlx(c) => Conn::Sqlx(c),
        }
    }
}

impl sealed::Sealed for &tokio_postgres::Client {}
impl<'c> Executor<'c> for &'c tokio_postgres::Client {
    fn into_conn(self) -> Conn<'c> {
        Conn::TokioClient(self)
    }
}

impl sealed::Sealed for &tokio_postgres::Transaction<'_> {}
impl<'c, 't: 'c> Executor<'c> for &'c tokio_postgres::Transaction<'t> {
    fn into_conn(self) -> Conn<'c> {
        Conn::TokioTx(self)
    }
}

impl sealed::Sealed for &deadpool_postgres::Client {}
impl<'c> Executor<'c> for &'c deadpool_postgres::Client {
    fn into_conn(self) -> Conn<'c> {
        let c: &tokio_postgres::Client = self;
        Conn::TokioClient(c)
    }
}

impl sealed::Sealed for &deadpool_postgres::Transaction<'_> {}
impl<'c, 't: 'c> Executor<'c> for &'c deadpool_postgres::Transaction<'t> {
    fn into_conn(self) -> Conn<'c> {
        let t: &tokio_postgres::Transaction<'t> = self;
        Conn::TokioTx(t)
    }
}

#[cfg(feature = "sqlx-0_8")]
impl sealed::Sealed for &mut sqlx::PgConnection {}
#[cfg(feature = "sqlx-0_8")]
impl<'c> Executor<'c> for &'c mut sqlx::PgConnection {
    fn into_conn(self) -> Conn<'c> {
        Conn::Sqlx(self)
    }
}

#[cfg(feature = "sqlx-0_8")]
impl sealed::Sealed for &mut sqlx::Transaction<'_, sqlx::Postgres> {}
#[cfg(feature = "sqlx-0_8")]
impl<'c, 't: 'c> Executor<'c> for &'c mut sqlx::Transaction<'t, sqlx::Postgres> {
    fn into_conn(self) -> Conn<'c> {
        Conn::Sqlx(self)
    }
}
