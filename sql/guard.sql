-- Sessions still running an older library may not write (src/library_guard.rs):
-- before any statement writes a pg_distlock table, library_guard compares
-- the version of the SQL installed (its argument) with the session's library.
-- Each release's update script drops and recreates these triggers with its
-- own version; a session that loaded an older library is refused (55000, or
-- 42883 for a library before 0.4.0, which has no library_guard). Reads are
-- not guarded.
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.scheduled_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_execution_log
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.completed_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.job_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.queue_settings
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lease_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.semaphore_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.semaphore_holders
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.leader_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.id_generator
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.rate_limit_windows
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.rate_limit_gcra
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lock_names
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.role_capabilities
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.sweep_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lock_key_secret
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
