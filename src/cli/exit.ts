/**
 * The CLI's exit statuses. `run` gives docker run's (125 for its own errors); the commands that
 * talk to a server exit 1 for sbx errors instead (REMOTE_EXIT in remote.ts). A command that ran
 * exits with its own status either way.
 */
export const EXIT = { usage: 2, timeout: 124, sbx: 125, cannotRun: 126, notFound: 127 } as const;

/** What a shell reports for a process ended by these signals (128 + the signal number). */
export const SIGNAL_EXIT: Record<string, number> = { SIGINT: 130, SIGTERM: 143, SIGPIPE: 141 };
