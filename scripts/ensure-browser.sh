#!/usr/bin/env bash
# The browser tests (tests/server/console) drive Debian's chromium through Debian's chromium-driver, which
# is built from the same source, so the two always match and nothing downloads a browser of its own.
# Installed already: exit 0 quietly. As root with apt-get: install them. Otherwise: say what to install, exit 1.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

if [[ -x $CHROMIUM && -x $CHROMEDRIVER ]]; then
    exit 0
fi

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium and chromium-driver for the browser tests…" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium chromium-driver >/dev/null
    if [[ -x $CHROMIUM && -x $CHROMEDRIVER ]]; then
        exit 0
    fi
    echo "ensure-browser: apt-get installed chromium and chromium-driver, but $CHROMIUM or $CHROMEDRIVER is still missing" >&2
    exit 1
fi

cat >&2 <<MSG
ensure-browser: the browser tests need $CHROMIUM and $CHROMEDRIVER.
Install the Debian packages chromium and chromium-driver, as root:
    apt-get update && apt-get install -y chromium chromium-driver
then run 'make browser' again.
MSG
exit 1
