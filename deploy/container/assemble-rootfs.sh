#!/bin/sh
# Assembles the container image's root filesystem in the builder stage:
#
#   assemble-rootfs.sh BINARY ROOT
#
# ROOT gets the binary at /usr/local/bin/understudy, exactly the shared
# libraries `ldd` lists for it (at the paths the loader looks in), the CA
# bundle, /etc/passwd and /etc/group with the non-root user `understudy`
# (65532), /etc/nsswitch.conf, the default configuration at
# /etc/understudy/understudy.toml, and /var/lib/understudy (the state file's
# directory, the user's) and /tmp. Nothing else: no shell, no tools.
set -eu

bin=$1
root=$2
here=$(dirname "$0")

mkdir -p "$root/usr/local/bin" "$root/etc/understudy" "$root/etc/ssl/certs" \
  "$root/var/lib/understudy" "$root/tmp"
cp "$bin" "$root/usr/local/bin/understudy"
chmod 0755 "$root/usr/local/bin/understudy"

# Each library by the path ldd resolved (`name => /path (addr)`), and the
# loader by its own (`/lib64/ld-linux-x86-64.so.2 (addr)`); the vDSO has
# no file. A library ldd cannot find fails the build.
ldd "$bin" | while read -r first second third rest; do
  case "$first $second $third" in
    *"not found"*) echo "assemble-rootfs: $first: not found" >&2; exit 1 ;;
  esac
  if [ "$second" = "=>" ]; then
    lib=$third
  else
    lib=$first
  fi
  case "$lib" in
    /*)
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
      ;;
  esac
done

cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
understudy:x:65532:65532:understudy:/var/lib/understudy:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
understudy:x:65532:
GROUP
cat >"$root/etc/nsswitch.conf" <<'NSS'
passwd: files
group: files
hosts: files dns
NSS

cp "$here/understudy.toml" "$root/etc/understudy/understudy.toml"
chmod 0644 "$root/etc/understudy/understudy.toml"
chown 65532:65532 "$root/var/lib/understudy"
chmod 0700 "$root/var/lib/understudy"
chmod 1777 "$root/tmp"
