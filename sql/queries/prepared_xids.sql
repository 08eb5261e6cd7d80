-- params: none
-- The transaction ids of every prepared transaction of the server (every
-- database: their outcome, whenever it comes, writes no runnable log
-- entry). Read once after the claim frontier's table is made (a start or
-- a crash restart empties it, while prepared transactions survive).
SELECT p.transaction::pg_catalog.text::pg_catalog.int8
  FROM pg_catalog.pg_prepared_xacts p
