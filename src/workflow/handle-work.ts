// Which asynchronous resources are work with an end that late-work.ts can watch: the libuv
// handles of a socket, a pipe, a child process, a UDP socket or a worker thread. The async hook sees only a
// resource's creation (no destroy hook, see late-work.ts), but such a resource is the
// handle's JS wrap, which answers `hasRef()` at any time (Node's HandleWrap::HasRef, checked
// on Node 20): true while open and ref'd, false once unref'd, and nothing (undefined) once
// closed, its native side gone. So it is pending exactly while it is open and ref'd: a child
// process until it exits and its pipes close, a request's socket until it closes, or, pooled
// by a keep-alive agent (http's Agent, undici), until the pool unrefs it idle. A socket
// reused from the pool arrives wrapped (http's ReusedHandle, `{ type, handle }`) and is
// ref'd again for its request; undici (`fetch`) reuses one silently, making no resource in
// the reusing run's scope: such a request is not seen at all. Servers and watchers
// (TCPSERVERWRAP, FSEVENTWRAP...) are left to the grace: they live as long as the program,
// not as one piece of work.

/** A handle's JS wrap (TCP, Pipe, Process, UDP, a worker thread's). */
export interface HandleLike {
  hasRef(): boolean | undefined;
  /** The file descriptor, on POSIX (stream handles). */
  readonly fd?: number;
  /** Bytes read and written so far (stream handles: TCP, Pipe; not Process or UDP). */
  readonly bytesRead?: number;
  readonly bytesWritten?: number;
}

/** A worker thread's handle (WORKER) answers hasRef() the same way: true while it runs and
 *  is ref'd, nothing once it exited. Left to the grace, a branch waiting for its answer past
 *  it let a replay's hold end, and another call take that branch's record
 *  (replay-own-work-swaps-findings). Its MessagePorts are left out: a port lives as long as the
 *  program that made it, as a server does. */
const WORK_HANDLES = new Set(["TCPWRAP", "PIPEWRAP", "PROCESSWRAP", "UDPWRAP", "WORKER"]);

/** The handle of a resource the hook saw created, when it is one whose end can be watched. */
export function workHandleOf(type: string, resource: object): HandleLike | undefined {
  if (!WORK_HANDLES.has(type)) return undefined;
  const r = resource as Partial<HandleLike> & { handle?: Partial<HandleLike> };
  const handle = typeof r.hasRef === "function" ? r : r.handle;
  return typeof handle?.hasRef === "function" ? (handle as HandleLike) : undefined;
}

/** `working`: open and ref'd; `idle`: open, unref'd (a pooled socket), may be ref'd again;
 *  `closed`; `stdio`: process.stdout's pipe, which workflow code may be the first to touch
 *  (it is made lazily) and which stays open for the program's life. */
export function handleState(handle: HandleLike): "working" | "idle" | "closed" | "stdio" {
  const ref = handle.hasRef();
  if (ref === undefined) return "closed";
  const fd = handle.fd;
  if (fd !== undefined && fd >= 0 && fd <= 2) return "stdio";
  return ref ? "working" : "idle";
}

/** How far a handle has moved: bytes read and written, and whether it is ref'd (a pool
 *  unrefs a socket whose request ended; a closing handle answers false before nothing). A
 *  change tells that its callbacks ran, so code joined with its work may have run. An open
 *  connection that only idles (a client kept for the run's life) does not move. */
export function handleProgress(handle: HandleLike): string {
  return `${(handle.bytesRead ?? 0) + (handle.bytesWritten ?? 0)}:${handle.hasRef()}`;
}
