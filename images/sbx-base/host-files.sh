# shellcheck shell=bash
# Host files scripts/images.sh copies into this image's build context: "SOURCE<TAB>CONTEXT-PATH".
# Debian's busybox-static (scripts/engine.sh installs it); the dynamic `busybox` package would not run in scratch.
printf '%s\t%s\n' /bin/busybox busybox
