-- params: none
-- The worker id of a consumer that gave none: its application_name (at most
-- 63 ASCII bytes), else its client address, else its backend pid.
SELECT COALESCE(
         CASE WHEN pg_catalog.current_setting('application_name') OPERATOR(pg_catalog.<>) ''
              THEN pg_catalog.current_setting('application_name') END,
         pg_catalog.host(pg_catalog.inet_client_addr()),
         'pid-' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid()::pg_catalog.text)
