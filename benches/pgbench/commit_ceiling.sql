-- The least a durable job can cost: one transaction writing one row.
UPDATE public.commit_ceiling SET n = n + 1 WHERE id = :client_id;
