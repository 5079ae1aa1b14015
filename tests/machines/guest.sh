# Another machine for cairn's tests: a QEMU guest with a CPU model of the test's choosing
# (SandyBridge, Nehalem, ...) and Debian's cloud kernel (6.1), under TCG. It sees this host's
# root file system read-only over virtiofs as its own root (so cairn, its libraries and the
# workloads are the same files) and one read-write directory shared with the host at the same path; its /tmp,
# /run, /proc, /dev and cgroups are its own. The guest runs one script and powers off.
#
#   . tests/machines/guest.sh
#   guest_check || exit 77            # QEMU, the kernel or virtiofsd missing: the test skips
#   guest_run SandyBridge "$shared" "$shared/script.sh"   # the script's exit status
#
# Its console is $shared/console.log; the script's output $shared/guest.out.

GUEST_CACHE=${GUEST_CACHE:-/var/tmp/cairn-guest}
GUEST_VIRTIOFSD=${GUEST_VIRTIOFSD:-/usr/lib/qemu/virtiofsd}
GUEST_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci fuse virtiofs"

guest_kernel() { ls /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -1; }

# Says what is missing for a guest (on stderr) and fails; succeeds when one can boot.
guest_check() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=("qemu-system-x86_64 (apt-get install qemu-system-x86)")
  [ -x "$GUEST_VIRTIOFSD" ] || missing+=("$GUEST_VIRTIOFSD (apt-get install qemu-system-common)")
  [ -n "$(guest_kernel)" ] || missing+=("a cloud kernel in /boot (apt-get install linux-image-cloud-amd64)")
  [ -x /bin/busybox ] || missing+=("/bin/busybox (apt-get install busybox-static)")
  command -v cpio >/dev/null || missing+=("cpio (apt-get install cpio)")
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'no guest machine: missing %s\n' "${missing[@]}" >&2
    return 1
  fi
}

# The initramfs: busybox, the virtio and virtiofs modules of the kernel, and an init that mounts
# the host's root read-only and the shared directory, then runs the script in a chroot.
guest_initrd() {
  local kernel release dir out
  kernel=$(guest_kernel)
  release=${kernel#/boot/vmlinuz-}
  out="$GUEST_CACHE/initrd-$release.cpio.gz"
  if [ -s "$out" ] && [ "$out" -nt "${BASH_SOURCE[0]}" ]; then echo "$out"; return; fi
  mkdir -p "$GUEST_CACHE"
  dir=$(mktemp -d "$GUEST_CACHE/initrd.XXXXXX")
  mkdir -p "$dir"/{bin,dev,proc,sys,newroot,modules}
  cp /bin/busybox "$dir/bin/busybox"
  local m path
  for m in $GUEST_MODULES; do
    path=$(find "/lib/modules/$release/kernel" -name "$m.ko*" | head -1)
    [ -n "$path" ] || { echo "guest: module $m of $release not found" >&2; rm -rf "$dir"; return 1; }
    case "$path" in
      *.xz) xz -dc "$path" >"$dir/modules/$m.ko" ;;
      *.zst) zstd -qdc "$path" >"$dir/modules/$m.ko" ;;
      *) cp "$path" "$dir/modules/$m.ko" ;;
    esac
  done
  cat >"$dir/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $GUEST_MODULES; do insmod /modules/\$m.ko || echo "guest: insmod \$m failed"; done
shared= script=
for a in \$(cat /proc/cmdline); do
  case "\$a" in cairn.shared=*) shared=\${a#cairn.shared=} ;; cairn.script=*) script=\${a#cairn.script=} ;; esac
done
n=/newroot
mount -t virtiofs -o ro hostroot \$n || { echo "guest: no host root"; poweroff -f; }
mount -t proc proc \$n/proc
mount -t sysfs sys \$n/sys
mount -t devtmpfs dev \$n/dev
mkdir -p \$n/dev/pts \$n/dev/shm 2>/dev/null
mount -t devpts devpts \$n/dev/pts
mount -t tmpfs shm \$n/dev/shm
mount -t tmpfs tmp \$n/tmp
mount -t tmpfs run \$n/run
mount -t tmpfs cgroup \$n/sys/fs/cgroup
for c in freezer memory pids cpu; do
  mkdir \$n/sys/fs/cgroup/\$c && mount -t cgroup -o \$c cgroup \$n/sys/fs/cgroup/\$c
done
mount -t virtiofs shared \$n\$shared || { echo "guest: no shared directory"; poweroff -f; }
hostname guest
ip link set lo up 2>/dev/null
# The host's root becomes the guest's (switch_root, as a real machine's initramfs does: not a
# chroot, whose root a setns into the mount namespace would undo); the script's shell is PID 1.
exec switch_root \$n /bin/sh -c "cd \$shared; /bin/bash \$script >\$shared/guest.out 2>&1; echo \\\$? >\$shared/guest.rc; sync; exec /bin/busybox poweroff -f"
EOF
  chmod +x "$dir/init"
  (cd "$dir" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$dir"
  echo "$out"
}

# guest_run MODEL SHARED SCRIPT [TIMEOUT_S]: boots a guest with CPU MODEL, runs SCRIPT (a path
# inside SHARED) there as root with SHARED as its working directory, and returns its exit
# status (125: the guest did not say, e.g. it did not boot or ran past the timeout).
guest_run() {
  local model=$1 shared=$2 script=$3 timeout=${4:-600}
  local initrd kernel run pids=() rc
  initrd=$(guest_initrd) || return 125
  kernel=$(guest_kernel)
  run=$(mktemp -d /tmp/cairn-guest-run.XXXXXX)
  rm -f "$shared/guest.rc" "$shared/guest.out"
  # cache=auto: with cache=none (direct I/O) the guest's kernel refuses shared mappings of the
  # files (ENODEV), which glibc makes (gconv-modules.cache). Nothing changes the files while the
  # guest runs.
  "$GUEST_VIRTIOFSD" --socket-path="$run/root.sock" -o source=/ -o cache=auto -o sandbox=chroot \
    -o log_level=err >"$run/vfs-root.log" 2>&1 &
  pids+=($!)
  "$GUEST_VIRTIOFSD" --socket-path="$run/shared.sock" -o source="$shared" -o cache=auto -o sandbox=chroot \
    -o log_level=err >"$run/vfs-shared.log" 2>&1 &
  pids+=($!)
  local i
  for i in $(seq 100); do
    [ -S "$run/root.sock" ] && [ -S "$run/shared.sock" ] && break
    sleep 0.05
  done
  timeout --kill-after=5 "$timeout" qemu-system-x86_64 -accel tcg,thread=multi -cpu "$model" -smp 2 -m 1536 \
    -object memory-backend-memfd,id=mem,size=1536M,share=on -numa node,memdev=mem \
    -chardev socket,id=root,path="$run/root.sock" -device vhost-user-fs-pci,chardev=root,tag=hostroot \
    -chardev socket,id=shared,path="$run/shared.sock" -device vhost-user-fs-pci,chardev=shared,tag=shared \
    -kernel "$kernel" -initrd "$initrd" -append "console=ttyS0 quiet panic=-1 cairn.shared=$shared cairn.script=$script" \
    -display none -serial file:"$shared/console.log" -monitor none -no-reboot -nodefaults >"$run/qemu.log" 2>&1
  rc=$?
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  if [ -s "$shared/guest.rc" ]; then
    rc=$(cat "$shared/guest.rc")
  else
    echo "guest: no exit status from the guest (qemu exit $rc); console:" >&2
    tail -20 "$shared/console.log" >&2
    cat "$run/qemu.log" "$run"/vfs-*.log >&2
    rc=125
  fi
  rm -rf "$run"
  return "$rc"
}
