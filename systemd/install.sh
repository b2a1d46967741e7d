#!/bin/sh
# Install entrepot for systemd in the layout systemd/entrepot.service names
# (docs/operations.md "Installed layout"). Run from the repository, as root: `make install`.
#
#   PREFIX      /opt/entrepot         PREFIX/venv: a virtualenv with entrepot installed in it;
#                                     PREFIX/doc: README.md and docs/operations.md
#   SYSCONFDIR  /etc/entrepot         entrepot.toml and mapping/ (an existing file is kept),
#                                     credentials/ (root only: the secrets LoadCredential= reads)
#   UNITDIR     /etc/systemd/system   entrepot.service, its paths rewritten to the two above
#   VIRTUALENV  PREFIX/venv           a virtualenv that already has entrepot: used, not made
#   PYTHON      python3               the interpreter the virtualenv is made with
#   DESTDIR     (empty)               staging root put before every path written, for packages;
#                                     the unit names the paths without it (needs VIRTUALENV)
#
# The data directory is systemd's (StateDirectory=entrepot: /var/lib/entrepot), made at the
# first start and owned by the service's dynamic user.
set -eu

PREFIX=${PREFIX:-/opt/entrepot}
SYSCONFDIR=${SYSCONFDIR:-/etc/entrepot}
UNITDIR=${UNITDIR:-/etc/systemd/system}
PYTHON=${PYTHON:-python3}
DESTDIR=${DESTDIR:-}
VIRTUALENV=${VIRTUALENV:-}
SRC=$(cd "$(dirname "$0")/.." && pwd)

for path in "$PREFIX" "$SYSCONFDIR" "$UNITDIR" ${VIRTUALENV:+"$VIRTUALENV"}; do
    case $path in
        /*) ;;
        *) echo "install.sh: $path: paths must be absolute" >&2; exit 2 ;;
    esac
done

if [ -z "$VIRTUALENV" ] && [ -n "$DESTDIR" ]; then
    echo "install.sh: a virtualenv works only where it was made: with DESTDIR, make it at" \
        "its final place first and pass VIRTUALENV=" >&2
    exit 2
fi
if [ -z "$VIRTUALENV" ]; then
    VIRTUALENV=$PREFIX/venv
    "$PYTHON" -m venv "$DESTDIR$VIRTUALENV"
    "$DESTDIR$VIRTUALENV/bin/python" -m pip install --quiet --upgrade pip
    "$DESTDIR$VIRTUALENV/bin/python" -m pip install --quiet "$SRC"
elif [ ! -x "$VIRTUALENV/bin/entrepot" ]; then
    echo "install.sh: VIRTUALENV=$VIRTUALENV has no bin/entrepot" >&2
    exit 1
fi

# The unit's ProtectHome=yes hides /home, /root and /run/user from the service: a virtualenv
# there, or one made with an interpreter there (pyenv's, under ~/.pyenv), cannot be run, and
# every start fails with status 203/EXEC.
for path in "$VIRTUALENV" "$(readlink -m "$DESTDIR$VIRTUALENV/bin/python")"; do
    case ${path#"$DESTDIR"} in
        /home/*|/root/*|/run/user/*)
            echo "install.sh: warning: $path is under /home, /root or /run/user, which the" \
                "unit's ProtectHome=yes hides from the service: it will fail to start" \
                "(status 203/EXEC). Use a virtualenv outside them made with an interpreter" \
                "outside them: without VIRTUALENV=, PYTHON=/usr/bin/python3 makes one." >&2
            break ;;
    esac
done

install -d -m 0755 "$DESTDIR$PREFIX/doc" "$DESTDIR$SYSCONFDIR" "$DESTDIR$SYSCONFDIR/mapping" \
    "$DESTDIR$UNITDIR"
install -m 0644 "$SRC/README.md" "$SRC/docs/operations.md" "$DESTDIR$PREFIX/doc/"
install -d -m 0700 "$DESTDIR$SYSCONFDIR/credentials"
if [ ! -e "$DESTDIR$SYSCONFDIR/entrepot.toml" ]; then
    install -m 0644 "$SRC/config/entrepot.toml" "$DESTDIR$SYSCONFDIR/entrepot.toml"
fi
for file in "$SRC"/config/mapping/*.xml; do
    [ -e "$file" ] || continue
    [ -e "$DESTDIR$SYSCONFDIR/mapping/${file##*/}" ] \
        || install -m 0644 "$file" "$DESTDIR$SYSCONFDIR/mapping/"
done

# The unit names /opt/entrepot/venv, /opt/entrepot and /etc/entrepot: each becomes a marker
# first (longest first), then its value, so that no value is rewritten again.
sed -e "s#/opt/entrepot/venv#@VENV@#g" -e "s#/opt/entrepot#@PREFIX@#g" \
    -e "s#/etc/entrepot#@SYSCONFDIR@#g" -e "s#@VENV@#$VIRTUALENV#g" -e "s#@PREFIX@#$PREFIX#g" \
    -e "s#@SYSCONFDIR@#$SYSCONFDIR#g" "$SRC/systemd/entrepot.service" \
    > "$DESTDIR$UNITDIR/entrepot.service.tmp"
chmod 0644 "$DESTDIR$UNITDIR/entrepot.service.tmp"
mv "$DESTDIR$UNITDIR/entrepot.service.tmp" "$DESTDIR$UNITDIR/entrepot.service"
echo "installed: $VIRTUALENV/bin/entrepot, $SYSCONFDIR/entrepot.toml, $UNITDIR/entrepot.service"
if [ -z "$DESTDIR" ] && [ "$UNITDIR" = /etc/systemd/system ]; then
    echo "then: systemctl daemon-reload && systemctl enable --now entrepot"
fi
