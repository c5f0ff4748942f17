// Every `cairn` command, in the order `cairn --help` lists them (main.ts dispatches by name;
// tests read each one's help).

import type { Command } from "../command.js";
import { approvalLink } from "./approval-link.js";
import { approve, reject } from "./approve.js";
import { cancel } from "./cancel.js";
import { checkReplayCommand } from "./check-replay.js";
import { events } from "./events.js";
import { fork } from "./fork.js";
import { gc } from "./gc.js";
import { result } from "./result.js";
import { resume } from "./resume.js";
import { runs } from "./runs.js";
import { send } from "./send.js";
import { show } from "./show.js";
import { start } from "./start.js";
import { ui } from "./ui.js";
import { worker } from "./worker.js";

export const COMMANDS: readonly Command[] = [
  runs,
  show,
  events,
  result,
  start,
  send,
  cancel,
  resume,
  fork,
  approve,
  reject,
  approvalLink,
  worker,
  checkReplayCommand,
  gc,
  ui,
];
