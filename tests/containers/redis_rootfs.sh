# Sourced by the container runtime tests. redis_rootfs_tar DIR OUT_TAR: a root file system for an
# image made without a registry — busybox (sh, sleep, cat) and redis-server with its libraries —
# built in DIR and packed into OUT_TAR.
redis_rootfs_tar() {
  local rootfs=$1 lib
  mkdir -p "$rootfs"/{bin,usr/bin,data,tmp,etc,proc,sys,dev}
  cp /bin/busybox "$rootfs/bin/"
  for a in sh sleep cat; do ln -s busybox "$rootfs/bin/$a"; done
  cp "$(command -v redis-server)" "$rootfs/usr/bin/"
  for lib in $(ldd "$(command -v redis-server)" | grep -o '/[^ ]*'); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  tar -C "$rootfs" -cf "$2" .
}
