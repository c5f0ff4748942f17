// cairn/postgres: the PostgreSQL store. Kept out of the root entry so that `import "cairn"`
// does not load `pg`, an optional peer dependency installed only by those who use it.

export { type PostgresStoreOptions, postgresStore } from "./store/postgres/postgres-store.js";
