"""What pg_distlock holds and who waits, read as a monitor role may, and the
admin actions: shared by the `pg-distlock` command and its web console."""
