#!/usr/bin/env bash
# Build gitmd_<version>_amd64.deb with dpkg-deb: the application in its own virtual environment
# under /opt/gitmd/venv (made with the system's /usr/bin/python3, which the package depends on),
# /usr/bin/gitmd and /usr/bin/gitmctl, the systemd unit + tmpfiles + sysusers, the default config
# as a conffile, maintainer scripts, man pages gitmd(8) and gitmctl(1), gitmctl's bash completion and
# the machine-readable copyright file. Run through `make deb` (which generates the protobuf code).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${DEB_OUT:-build/deb}
SYS_PY=${DEB_PYTHON:-/usr/bin/python3}
VERSION=$(.venv/bin/python -c 'import gitmd; print(gitmd.__version__)')
PYVER=$("$SYS_PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
ARCH=$(dpkg --print-architecture)
PKG=gitmd_${VERSION}_${ARCH}
STAGE=$OUT/$PKG
VENV=/opt/gitmd/venv

[ -f gitmd/api/_generated/gitm/v1/gitmd_pb2.py ] || { echo "generated protobuf code missing: run make deb" >&2; exit 1; }
echo "building $PKG.deb (python $PYVER from $SYS_PY)"
rm -rf "$STAGE"
mkdir -p "$STAGE"
"$SYS_PY" -m venv "$STAGE$VENV"
"$STAGE$VENV/bin/python" -m pip install -q --no-compile --disable-pip-version-check -c constraints.txt .
# Build-time tools only: pip and setuptools (pkg_resources, the distutils hack) are never imported at
# run time. The test suites the bundled packages carry (numpy, scipy, pandas, statsmodels: ~60 MB, see
# docs/operations.md#package-size) are not run here either.
"$STAGE$VENV/bin/python" -m pip uninstall -q -y setuptools pip
find "$STAGE$VENV/lib" -type d -name tests -path '*/site-packages/*' -prune -exec rm -rf {} +
# The venv was made at its staging path: point scripts and config at the installed path.
{ grep -rlI --null "$PWD/$STAGE" "$STAGE$VENV" || true; } | xargs -0 -r sed -i "s|$PWD/$STAGE||g"
{ grep -rlI --null "$STAGE" "$STAGE$VENV" || true; } | xargs -0 -r sed -i "s|$STAGE||g"
# Man pages and completion, generated from the argparse parsers (tools/manpages.py, tools/completion.py)
# by the staged environment's Python: what the package ships documents what it runs.
GEN=$OUT/$PKG.generated
rm -rf "$GEN" && mkdir -p "$GEN"
PYTHONDONTWRITEBYTECODE=1 "$STAGE$VENV/bin/python" tools/manpages.py --out "$GEN"
PYTHONDONTWRITEBYTECODE=1 "$STAGE$VENV/bin/python" tools/completion.py --output "$GEN/gitmctl.bash"
find "$STAGE" -name __pycache__ -prune -exec rm -rf {} +

install -d "$STAGE/usr/bin" "$STAGE/lib/systemd/system" "$STAGE/usr/lib/sysusers.d" "$STAGE/usr/lib/tmpfiles.d" \
  "$STAGE/etc/gitmd" "$STAGE/usr/share/doc/gitmd" "$STAGE/DEBIAN"
for tool in gitmd gitmctl; do
  cat > "$STAGE/usr/bin/$tool" <<WRAP
#!/bin/sh
# $tool runs from its own virtual environment under /opt/gitmd (found relative to this script).
here=\$(dirname "\$(readlink -f "\$0")")
exec "\$here/../..$VENV/bin/python" -m $tool "\$@"
WRAP
  chmod 0755 "$STAGE/usr/bin/$tool"
done
install -m 0644 packaging/systemd/gitmd.service "$STAGE/lib/systemd/system/gitmd.service"
install -m 0644 packaging/systemd/gitmd.sysusers "$STAGE/usr/lib/sysusers.d/gitmd.conf"
install -m 0644 packaging/systemd/gitmd.tmpfiles "$STAGE/usr/lib/tmpfiles.d/gitmd.conf"
install -m 0644 packaging/gitmd.toml "$STAGE/etc/gitmd/gitmd.toml"
install -m 0644 README.md "$STAGE/usr/share/doc/gitmd/README.md"
install -m 0644 packaging/deb/copyright "$STAGE/usr/share/doc/gitmd/copyright"
install -d "$STAGE/usr/share/man/man8" "$STAGE/usr/share/man/man1" "$STAGE/usr/share/bash-completion/completions"
gzip -9n -c "$GEN/gitmd.8" > "$STAGE/usr/share/man/man8/gitmd.8.gz"
gzip -9n -c "$GEN/gitmctl.1" > "$STAGE/usr/share/man/man1/gitmctl.1.gz"
chmod 0644 "$STAGE/usr/share/man/man8/gitmd.8.gz" "$STAGE/usr/share/man/man1/gitmctl.1.gz"
install -m 0644 "$GEN/gitmctl.bash" "$STAGE/usr/share/bash-completion/completions/gitmctl"
rm -rf "$GEN"
cp -r docs "$STAGE/usr/share/doc/gitmd/docs" && chmod -R u=rwX,go=rX "$STAGE/usr/share/doc/gitmd/docs"
[ -f shim/build/libgitm_shim.so ] && install -D -m 0755 shim/build/libgitm_shim.so "$STAGE/usr/lib/gitmd/libgitm_shim.so"
[ -f shim/build/libgitm_guard.so ] && install -D -m 0755 shim/build/libgitm_guard.so "$STAGE/usr/lib/gitmd/libgitm_guard.so"
[ -f shim/build/libgitm_clock.so ] && install -D -m 0755 shim/build/libgitm_clock.so "$STAGE/usr/lib/gitmd/libgitm_clock.so"
# Scheduler integration: Slurm's Prolog/Epilog/TaskProlog, and the launcher for container images.
for script in gitmd-prolog gitmd-epilog gitmd-taskprolog; do
  install -D -m 0755 "packaging/slurm/$script" "$STAGE/usr/lib/gitmd/slurm/$script"
done
install -D -m 0644 packaging/slurm/gitmd-slurm.default "$STAGE/usr/share/doc/gitmd/examples/gitmd-slurm.default"
install -D -m 0755 packaging/k8s/gitm-launch "$STAGE/usr/bin/gitm-launch"

echo /etc/gitmd/gitmd.toml > "$STAGE/DEBIAN/conffiles"
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat > "$STAGE/DEBIAN/control" <<CTRL
Package: gitmd
Version: $VERSION
Architecture: $ARCH
Maintainer: gitmd developers <gitmd@localhost>
Installed-Size: $SIZE
Depends: python$PYVER, libc6
Section: admin
Priority: optional
Description: GPU job tuning daemon
 gitmd owns the GPUs of a host: it samples telemetry (NVML, ROCm SMI), captures
 what CUDA jobs do through an injected CUPTI shim, tries runtime changes as
 controlled experiments and keeps only those proven faster with unchanged outputs.
 gitmctl is its command line.
CTRL
for script in postinst prerm postrm; do
  install -m 0755 "packaging/deb/$script" "$STAGE/DEBIAN/$script"
done
dpkg-deb --root-owner-group -Zgzip --build "$STAGE" "$OUT/$PKG.deb" >/dev/null
echo "$OUT/$PKG.deb"
