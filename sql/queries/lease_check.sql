-- params: text, bigint, timestamptz
SELECT EXISTS (SELECT 1 FROM distlock.lease_state
                WHERE name OPERATOR(pg_catalog.=) $1 AND token OPERATOR(pg_catalog.=) $2
                  AND expires_at OPERATOR(pg_catalog.>) $3)
