-- One database per service, as each owns its schema and migrations.
CREATE DATABASE auth;
CREATE DATABASE provider_registry;
CREATE DATABASE billing;
CREATE DATABASE storage;
