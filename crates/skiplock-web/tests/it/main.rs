//! Integration tests: the dashboard's router against a real PostgreSQL (`DATABASE_URL`, or a
//! throwaway cluster started from the local server binaries), each test in a schema of its
//! own; and the pages in a real headless browser.
#![allow(clippy::unwrap_used)]

mod actions;
mod auth;
mod bench;
mod browser;
mod control;
mod flow;
mod operator;
mod pages;
mod pagination;
mod pgbouncer;
mod support;
mod workflow;
