/**
 * Killing an exec and everything it started, for runtimes whose exec cannot (the Docker Engine's
 * fallback path, Kubernetes): the marker every such exec carries and the in-box killer script.
 */
/**
 * Every exec carries this variable so that a timeout or cancel can find the process and
 * everything it started: neither the Engine API nor Kubernetes has a "kill exec", and closing
 * the connection leaves the process running. See docs/exec.md.
 */
export const EXEC_MARKER_ENV = 'SBX_EXEC_ID';

/**
 * The killer, run as a second exec (the engine's, or Kubernetes') as the exec's own user (who may read its processes' /proc
 * entries and signal them), with the marker as $1. A target is a process
 * - whose environ holds the marker (children inherit it),
 * - whose parent is a target (`env -i` children),
 * - that shares a session with a target (orphans of a target that died; a process group never
 *   spans sessions, so this covers the groups too), or
 * - that holds the exec's output: the exec's own process (the marked one with no parent in
 *   the box) has the runtime's pipes (or terminal) as stdout and stderr, and any process with
 *   one of those open keeps the engine's stream open, escaped or not.
 * Each target is stopped as soon as it is found and the scan repeats until a pass finds
 * nothing new: a stopped process cannot fork, so nothing escapes between passes; then all
 * are killed at once. /proc is read with shell builtins only (`read -d ''` splits environ at
 * its NULs in busybox ash, bash, zsh and mksh; `test -ef` compares open files); a shell
 * without `read -d` (dash) falls back to tr and grep for the environ check. PID 1 and the
 * killer itself are never targets. It says KILLER_DONE when done. See docs/exec.md.
 */
export const KILLER_DONE = 'sbx-killed';
export const KILL_SCRIPT = `m="${EXEC_MARKER_ENV}=$1" me=$$ hasd=
read -r -d '' v < "/proc/$me/environ" 2>/dev/null && hasd=1
marked() {
  if [ -n "$hasd" ]; then
    while IFS= read -r -d '' v; do [ "$v" = "$m" ] && return 0; done < "$1/environ"
    return 1
  fi
  tr '\\0' '\\n' < "$1/environ" | grep -qxF "$m"
}
T=' ' S=' ' R=' ' seen=' '
scan() {
  added=
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    case "$p" in "$me" | 1) continue ;; esac
    case "$T" in *" $p "*) continue ;; esac
    read -r st < "$d/stat" || continue
    set -- \${st##*) }
    hit=
    case "$T" in *" $2 "*) hit=1 ;; esac
    case "$S" in *" $4 "*) hit=1 ;; esac
    if [ -z "$hit" ]; then
      for r in $R; do for f in "$d"/fd/*; do [ "$f" -ef "$r" ] && hit=1; done; done
    fi
    if [ -z "$hit" ]; then
      case "$seen" in *" $p "*) continue ;; esac
      seen="$seen$p "
      marked "$d" 2>/dev/null || continue
    fi
    kill -STOP "$p" 2>/dev/null
    T="$T$p " added=1
    [ "$4" -gt 1 ] && S="$S$4 "
    [ "$2" = 0 ] || continue
    for f in "$d/fd/1" "$d/fd/2"; do
      [ -p "$f" ] && R="$R$f "
      for t in /dev/pts/[0-9]*; do [ "$f" -ef "$t" ] && R="$R$f "; done
    done
  done
}
n=0
while [ $n -lt 50 ]; do scan; [ -z "$added" ] && break; n=$((n + 1)); done
for p in $T; do kill -KILL "$p" 2>/dev/null; done
echo ${KILLER_DONE}`;
