/** Image every box of the benchmark runs; built by scripts/images.sh. */
export const BASE_IMAGE = 'sbx-base:latest';

/** The user label sbx boxes get; sbx writes user labels as `sbx.label.<key>`. */
export const BENCH_LABEL = 'bench';

/**
 * What the sweeper looks for on containers of either side. Its value is the pid of the bench
 * run that made the container, so a later run can tell leftovers of a dead run from the
 * containers of one still running beside it.
 */
export const BENCH_CONTAINER_LABEL = `sbx.label.${BENCH_LABEL}`;
