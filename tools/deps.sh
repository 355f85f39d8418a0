#!/usr/bin/env bash
# deps.sh: make sure the Debian/Ubuntu packages tf builds and tests with are
# present. As root it installs the missing ones with apt-get; otherwise it
# prints the exact apt-get line and fails. Each line of the table below is
# "how to probe<TAB>package"; a probe is "pc:NAME" (pkg-config), "h:HEADER"
# (a header under /usr/include), "cmd:NAME" (a program on PATH) or
# "py:MODULE" (a module of the system /usr/bin/python3).
set -u
table='pc:jansson	libjansson-dev
pc:libarchive	libarchive-dev
pc:libpcre2-8	libpcre2-dev
pc:libutf8proc	libutf8proc-dev
pc:libmicrohttpd	libmicrohttpd-dev
pc:liburing	liburing-dev
pc:libcrypto	libssl-dev
pc:check	check
h:subunit/child.h	libsubunit-dev
h:infiniband/verbs.h	libibverbs-dev
cmd:pkg-config	pkg-config
cmd:cc	gcc
cmd:clang	clang
cmd:make	make
cmd:mandoc	mandoc
cmd:node	nodejs
cmd:npm	npm
cmd:python3	python3
py:numpy	python3-numpy
cmd:git	git
cmd:curl	curl
cmd:xxd	xxd
cmd:shellcheck	shellcheck'

have() {
	case $1 in
	pc:*) pkg-config --exists "${1#pc:}" 2>/dev/null ;;
	h:*) [ -e "/usr/include/${1#h:}" ] || [ -e "/usr/include/x86_64-linux-gnu/${1#h:}" ] ;;
	cmd:*) command -v "${1#cmd:}" >/dev/null 2>&1 ;;
	py:*) /usr/bin/python3 -c "import ${1#py:}" 2>/dev/null ;;
	esac
}

missing=()
while IFS=$'\t' read -r probe pkg; do
	have "$probe" || missing+=("$pkg")
done <<<"$table"
[ ${#missing[@]} -eq 0 ] && exit 0

# pkg-config itself missing makes every pc: probe fail; list each package once.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages; run as root:" >&2
	echo "  $line" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! $line >/tmp/tf-deps.log 2>&1; then
	apt-get update >/tmp/tf-deps.log 2>&1 || true
	$line >>/tmp/tf-deps.log 2>&1 || { echo "deps: apt-get failed; see /tmp/tf-deps.log" >&2; tail -20 /tmp/tf-deps.log >&2; exit 1; }
fi
exit 0
