#!/usr/bin/env bash
# Proves the README's two commands on a machine that has nothing installed:
# debootstraps a minimal Debian 12 root into a folder, copies the project and
# ../shared into it, and runs scripts/quickstart.sh then scripts/test.sh
# there with chroot. Prints each step's time, and the last lines of the log
# of any step that fails. Run it (as root) whenever setup, build or
# dependencies change; it takes about an hour on two cores.
#
#   scripts/fresh-check.sh [--head] [--keep] [--root DIR] [--reuse] [--only quickstart|test]
#     --head   copy a clean clone of HEAD (default: the working tree's tracked
#              and not-ignored files, so uncommitted edits are checked too)
#     --keep   leave the root in place afterwards (logs are in DIR/logs)
#     --root   where to build the root (default: a new folder under /var/tmp)
#     --reuse  with --root: keep a root made earlier (with --keep) and its
#              packages and compiler cache; only the project is copied anew
#     --only   run one of the two commands
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

use_head=0 keep=0 reuse=0 root="" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --head) use_head=1; shift ;;
    --keep) keep=1; shift ;;
    --reuse) reuse=1; shift ;;
    --root) root=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: scripts/fresh-check.sh [--head] [--keep] [--root DIR] [--reuse] [--only quickstart|test]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: needs root (debootstrap and chroot)" >&2; exit 2; }
[ -d ../shared ] || { echo "fresh-check: ../shared (models, golden vectors) not found beside the repository" >&2; exit 2; }
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi

mirror=${LLMK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=${root:-$(mktemp -d /var/tmp/llmk-fresh.XXXXXX)}
logs=$root/logs
mkdir -p "$root"

unmount_all() {
  for m in dev/shm dev/pts dev sys proc; do
    mountpoint -q "$root/$m" && umount -l "$root/$m" || true
  done
}
cleanup() {
  unmount_all
  if [ "$keep" -eq 0 ]; then rm -rf "$root"; else echo "fresh-check: root kept at $root (logs in $logs)"; fi
}
trap cleanup EXIT

step_times=()
# step NAME COMMAND...: runs with output to logs/NAME.log; on failure shows
# its tail and stops.
step() {
  local name=$1; shift
  local t0=$SECONDS
  echo "--- $name"
  if "$@" >"$logs/$name.log" 2>&1; then
    step_times+=("$(printf '%-12s %5d s' "$name" $((SECONDS - t0)))")
    echo "    ok in $((SECONDS - t0)) s"
  else
    local rc=$?
    echo "    FAILED (exit $rc) after $((SECONDS - t0)) s; last lines of $logs/$name.log:"
    tail -n 40 "$logs/$name.log" | sed 's/^/    /'
    exit 1
  fi
}

bootstrap() {
  debootstrap --variant=minbase bookworm "$root" "$mirror"
  # A fresh Debian 12 machine also has its updates and security suites.
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
}

copy_project() {
  rm -rf "$root/work"
  mkdir -p "$root/work/llmk" "$root/work/shared"
  if [ "$use_head" -eq 1 ]; then
    git -C "$repo" archive --format=tar HEAD | tar -x -C "$root/work/llmk"
  else
    git -C "$repo" ls-files -z --cached --others --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -c -f - | tar -x -C "$root/work/llmk"
  fi
  cp -a "$repo/../shared/." "$root/work/shared/"
}

# The network trust a machine of this workplace starts with: extra CA
# certificates (an HTTPS-inspecting egress proxy) and pip's settings. They
# are the host's, not install steps the project could take.
carry_host_network_trust() {
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    # Taken into the bundle when ca-certificates is installed or updated.
    [ -x "$root/usr/sbin/update-ca-certificates" ] && chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
  fi
}
host_env=()
for v in PIP_CERT PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT http_proxy https_proxy no_proxy; do
  if [ -n "${!v:-}" ]; then host_env+=("$v=${!v}"); fi
done

mount_all() {
  mount -t proc proc "$root/proc"
  mount -t sysfs sys "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  mkdir -p "$root/dev/shm" && mount -t tmpfs shm "$root/dev/shm"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
}

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 "${host_env[@]}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /work/llmk && $1"
}

mkdir -p "$logs"
echo "fresh-check: Debian 12 root at $root ($(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
if [ "$reuse" -eq 1 ] && [ -f "$root/etc/debian_version" ]; then
  echo "--- debootstrap: reusing the root made earlier"
else
  step debootstrap bootstrap
fi
step copy copy_project
mount_all
carry_host_network_trust
[ "$only" = test ] || step quickstart in_root scripts/quickstart.sh
[ "$only" = quickstart ] || step test in_root scripts/test.sh
tail -n 3 "$logs/quickstart.log" 2>/dev/null | sed 's/^/    quickstart: /' || true
grep -E "tests passed|tests failed|Skipped|Total Test time" "$logs/test.log" 2>/dev/null | sed 's/^/    test: /' || true
echo "fresh-check: passed"
printf '  %s\n' "${step_times[@]}"
