-- Every definition pg_distlock installs, one sorted line per fact, with no
-- data: a database upgraded with ALTER EXTENSION pg_distlock UPDATE must
-- print exactly what a fresh CREATE EXTENSION prints. pg_dump leaves out
-- extension members, so this reads the catalogs instead.
--   psql -At -d DB -f tests/cluster/schema_fingerprint.sql
WITH ext AS (
    SELECT e.oid, e.extnamespace FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_distlock'
),
members AS (
    SELECT d.classid, d.objid
      FROM pg_catalog.pg_depend d, ext
     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid = ext.oid AND d.deptype = 'e'
),
rels AS (
    SELECT c.oid, c.relname, c.relkind
      FROM pg_catalog.pg_class c, ext
     WHERE c.relnamespace = ext.extnamespace
),
acl(owner_kind, owner_name, acl) AS (
    SELECT 'schema', n.nspname, n.nspacl FROM pg_catalog.pg_namespace n, ext WHERE n.oid = ext.extnamespace
    UNION ALL
    SELECT 'relation', r.relname, c.relacl FROM rels r JOIN pg_catalog.pg_class c ON c.oid = r.oid
    UNION ALL
    SELECT 'function', p.oid::pg_catalog.regprocedure::text, p.proacl
      FROM pg_catalog.pg_proc p, ext WHERE p.pronamespace = ext.extnamespace
    UNION ALL
    SELECT 'column', r.relname || '.' || a.attname, a.attacl
      FROM rels r JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid
     WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL
    UNION ALL
    SELECT 'type', t.typname, t.typacl
      FROM pg_catalog.pg_type t, ext WHERE t.typnamespace = ext.extnamespace AND t.typacl IS NOT NULL
),
facts(line) AS (
    -- what belongs to the extension
    SELECT 'member ' || pg_catalog.pg_describe_object(m.classid, m.objid, 0) FROM members m
    UNION ALL
    -- relations: kind, persistence, options, owner
    SELECT 'relation ' || r.relname || ' kind=' || r.relkind::text || ' persistence=' || c.relpersistence::text
           || ' options=' || COALESCE(c.reloptions::text, '{}')
           || ' owner=' || pg_catalog.pg_get_userbyid(c.relowner)
      FROM rels r JOIN pg_catalog.pg_class c ON c.oid = r.oid
    UNION ALL
    -- columns in order (dropped ones skipped), type, nullability, default
    SELECT 'column ' || r.relname || ' #' || pg_catalog.row_number() OVER (PARTITION BY r.oid ORDER BY a.attnum)
           || ' ' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || COALESCE(' default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
      FROM rels r
      JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = r.oid AND ad.adnum = a.attnum
     WHERE r.relkind IN ('r', 'v', 'p', 'm')
    UNION ALL
    SELECT 'constraint ' || r.relname || ' ' || co.conname || ' ' || pg_catalog.pg_get_constraintdef(co.oid)
      FROM rels r JOIN pg_catalog.pg_constraint co ON co.conrelid = r.oid
    UNION ALL
    SELECT 'index ' || pg_catalog.pg_get_indexdef(r.oid) FROM rels r WHERE r.relkind = 'i'
    UNION ALL
    SELECT 'view ' || r.relname || ' ' || pg_catalog.pg_get_viewdef(r.oid, true) FROM rels r WHERE r.relkind = 'v'
    UNION ALL
    SELECT 'sequence ' || r.relname || ' ' || s.seqtypid::pg_catalog.regtype || ' start=' || s.seqstart
           || ' increment=' || s.seqincrement || ' min=' || s.seqmin || ' max=' || s.seqmax
           || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle
           || COALESCE(' owned by ' || (SELECT o.relname || '.' || a.attname
                                          FROM pg_catalog.pg_depend d
                                          JOIN pg_catalog.pg_class o ON o.oid = d.refobjid
                                          JOIN pg_catalog.pg_attribute a
                                            ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                                         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                                           AND d.objid = r.oid AND d.deptype IN ('a', 'i')
                                           AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass), '')
      FROM rels r JOIN pg_catalog.pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(tg.oid)
      FROM rels r JOIN pg_catalog.pg_trigger tg ON tg.tgrelid = r.oid AND NOT tg.tgisinternal
    UNION ALL
    -- functions with every attribute pg_get_functiondef prints (language,
    -- volatility, strictness, parallel safety, security, SET clauses, body)
    SELECT 'function ' || p.oid::pg_catalog.regprocedure || ' '
           || CASE p.prokind WHEN 'a' THEN 'aggregate' ELSE pg_catalog.pg_get_functiondef(p.oid) END
      FROM pg_catalog.pg_proc p, ext WHERE p.pronamespace = ext.extnamespace
    UNION ALL
    -- domains and other types the extension declares
    SELECT 'type ' || t.typname || ' ' || t.typtype::text
           || COALESCE(' over ' || pg_catalog.format_type(t.typbasetype, t.typtypmod), '')
           || CASE WHEN t.typnotnull THEN ' not null' ELSE '' END
      FROM pg_catalog.pg_type t, ext
     WHERE t.typnamespace = ext.extnamespace AND t.typtype IN ('d', 'e', 'b', 'r')
    UNION ALL
    SELECT 'type constraint ' || t.typname || ' ' || co.conname || ' ' || pg_catalog.pg_get_constraintdef(co.oid)
      FROM pg_catalog.pg_type t, ext, pg_catalog.pg_constraint co
     WHERE t.typnamespace = ext.extnamespace AND co.contypid = t.oid
    UNION ALL
    -- privileges, item by item, so that grant order does not matter
    SELECT 'grant ' || acl.owner_kind || ' ' || acl.owner_name || ' '
           || CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(x.grantee) END
           || ' ' || x.privilege_type || CASE WHEN x.is_grantable THEN ' with grant option' ELSE '' END
      FROM acl CROSS JOIN LATERAL pg_catalog.aclexplode(acl.acl) x
     WHERE acl.acl IS NOT NULL
    UNION ALL
    -- what pg_dump takes as the extension's own privileges (pg_init_privs),
    -- item by item: a user's grant recorded here would vanish in a restore
    SELECT 'initial grant ' || pg_catalog.pg_describe_object(ip.classoid, ip.objoid, ip.objsubid) || ' '
           || CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(x.grantee) END
           || ' ' || x.privilege_type || CASE WHEN x.is_grantable THEN ' with grant option' ELSE '' END
      FROM pg_catalog.pg_init_privs ip
      -- the members and the schema, which CREATE EXTENSION makes but which
      -- is no member (grants on it inside a script are recorded all the same)
      JOIN (SELECT m.classid, m.objid FROM members m
            UNION ALL
            SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, ext.extnamespace FROM ext) m
        ON m.classid = ip.classoid AND m.objid = ip.objoid
     CROSS JOIN LATERAL pg_catalog.aclexplode(ip.initprivs) x
     WHERE ip.privtype = 'e'
    UNION ALL
    -- comments on the schema, relations, columns and functions
    SELECT 'comment ' || pg_catalog.pg_describe_object(dsc.classoid, dsc.objoid, dsc.objsubid) || ': ' || dsc.description
      FROM pg_catalog.pg_description dsc, ext
     WHERE (dsc.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND dsc.objoid IN (SELECT r.oid FROM rels r))
        OR (dsc.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
            AND dsc.objoid IN (SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.pronamespace = ext.extnamespace))
        OR (dsc.classoid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND dsc.objoid = ext.extnamespace)
    UNION ALL
    -- tables whose rows pg_dump keeps, with their filters
    SELECT 'dumped ' || cfg.relid::pg_catalog.regclass || ' where ' || COALESCE(NULLIF(cfg.cond, ''), 'true')
      FROM pg_catalog.pg_extension e, ext,
           LATERAL ROWS FROM (pg_catalog.unnest(e.extconfig), pg_catalog.unnest(e.extcondition)) AS cfg(relid, cond)
     WHERE e.oid = ext.oid
)
SELECT line FROM facts ORDER BY line COLLATE "C";
