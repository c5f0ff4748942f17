// cairn/sqlite: the embedded SQLite store (also exported by the root entry, as the default).

export {
  type SqliteStore,
  type SqliteStoreOptions,
  sqliteStore,
} from "./store/sqlite/sqlite-store.js";
