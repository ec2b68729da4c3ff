# Sourced by kiln's scripts: `apt_install WHO PACKAGE...` installs the Debian packages that are missing.
# Idempotent: when every package is installed it does nothing (no apt-get update, no network). Not root
# with packages missing: says what to run and returns 1.
apt_install() {
  local who=$1
  shift
  local missing=() package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
      missing+=("$package")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "$who: missing packages: ${missing[*]}" >&2
    echo "$who: run as root, or: sudo apt-get install ${missing[*]}" >&2
    return 1
  fi
  echo "$who: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
