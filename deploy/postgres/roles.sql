-- The roles auth and billing run as (services/auth/README.md and services/billing/README.md, "The audit trail"): the
-- owner of the databases (POSTGRES_USER, `platform`) runs the migrations (the auth-migrate and billing-migrate steps of
-- docker-compose.yml), each service connects as a role of its own that owns nothing and may only append to and read
-- its audit trail (the migration step grants it the rest), and a purge role deletes audit events past the retention.
-- Development passwords: change them (and the URLs in docker-compose.yml) before exposing anything.
-- A volume made before these roles: docker compose exec postgres psql -U platform -f /docker-entrypoint-initdb.d/20-roles.sql
CREATE ROLE auth_app LOGIN PASSWORD 'auth-app';
CREATE ROLE auth_audit_purge LOGIN PASSWORD 'auth-audit-purge';
CREATE ROLE billing_app LOGIN PASSWORD 'billing-app';
CREATE ROLE billing_audit_purge LOGIN PASSWORD 'billing-audit-purge';
