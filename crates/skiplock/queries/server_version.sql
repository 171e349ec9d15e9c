-- The server's version, for reports.
SHOW server_version
