#!/bin/sh
# The test services run beside whatever command the box was given (by default the graceful sleep),
# so attach and proxy tests need nothing started by hand. Their errors go to the container's log.
node /opt/sbx-test/services.mjs &
exec "$@"
