// Delivers StoreHints to subscribers in this process. A SQLite file's writers in other
// processes send none here: hints are only hints, and pollers find what they missed.

import { EventEmitter } from "node:events";
import type { StoreHint } from "../store.js";

export class Hints {
  readonly #emitter = new EventEmitter();

  constructor() {
    this.#emitter.setMaxListeners(0);
  }

  emit(hint: StoreHint): void {
    this.#emitter.emit("hint", hint);
  }

  subscribe(listener: (hint: StoreHint) => void): () => void {
    const guarded = (hint: StoreHint) => {
      try {
        listener(hint);
      } catch (err) {
        // Hints are advice about a write that already committed; a failing listener must
        // neither fail that write nor starve the other listeners.
        process.emitWarning(`cairn: a store hint listener threw: ${String(err)}`);
      }
    };
    this.#emitter.on("hint", guarded);
    return () => {
      this.#emitter.off("hint", guarded);
    };
  }
}
