#!/usr/bin/env bash
# check-runtime-packages.sh LIST PREFIX: checks that the runtime package list LIST (one package a
# line, '#' comments: docker/runtime-packages.txt or runtime-packages-cuda.txt) names the owner
# of every system library that the installed tree PREFIX (cmake --install's prefix, e.g.
# /opt/cube3d) links directly, and that nothing its binaries and libraries need is missing.
# Run where the build's packages are installed (the image's builder stage, or this machine for
# scripts/image_smoke.sh): the owners are looked up with dpkg. Needs ldd, readelf (binutils)
# and dpkg-query. Exit 0: the list is complete; 1: it is not (the missing packages are named);
# 2: usage. The base image's C and C++ runtime (libc6, libgcc-s1, libstdc++6) need no line, and
# the NVIDIA driver's libraries (libcuda.so.1: ATen's NVRTC stub links it) come from the host.
set -euo pipefail

BASE_PACKAGES=" libc6 libgcc-s1 libstdc++6 "
DRIVER_LIBS='^(libcuda\.so|libnvidia-)'

die() {
  echo "check-runtime-packages: $*" >&2
  exit 2
}
(($# == 2)) || die "usage: $0 LIST PREFIX"
list=$1
prefix=$(cd "$2" 2> /dev/null && pwd) || die "$2: no such folder"
[ -f "$list" ] || die "$list: no such file"
for tool in ldd readelf dpkg-query; do
  command -v "$tool" > /dev/null || die "needs $tool"
done

listed=" $(sed 's/#.*//' "$list" | xargs) "

# The package that owns a library path (cached: dpkg-query -S reads every package's file list);
# usrmerge means the loader's /lib/... may be recorded as /usr/lib/... (or the other way round),
# and the path may be a symlink.
declare -A owners=()
owner() {
  local path=$1 candidate real pkg
  if [ -z "${owners[$path]+set}" ]; then
    owners[$path]=""
    real=$(realpath -m "$path")
    for candidate in "$path" "$real" "${real#/usr}" "/usr$real" "${path#/usr}" "/usr$path"; do
      pkg=$(dpkg-query -S "$candidate" 2> /dev/null | head -1 | cut -d: -f1) || true
      if [ -n "$pkg" ]; then
        owners[$path]=$pkg
        break
      fi
    done
  fi
  [ -n "${owners[$path]}" ] && echo "${owners[$path]}"
}

files=()
while IFS= read -r -d '' f; do
  # ELF files only (the tree has none but its binaries and libraries, but be sure).
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ] && files+=("$f")
done < <(find "$prefix/bin" "$prefix/lib" -maxdepth 1 -type f -print0 2> /dev/null)
((${#files[@]})) || die "$prefix has no binaries or libraries (bin/, lib/)"

status=0
declare -A needed_by=()
for f in "${files[@]}"; do
  # ldd resolves every name the file needs, as the loader would; readelf says which of them
  # the file names itself (its direct dependencies: the ones its list entry must cover).
  map=$(ldd "$f" 2>&1) || true
  missing=$(grep "not found" <<< "$map" | grep -Ev "^\s*${DRIVER_LIBS#^}") || true
  if [ -n "$missing" ]; then
    echo "check-runtime-packages: ${f#"$prefix"/} needs libraries that are not found:" >&2
    echo "$missing" >&2
    status=1
  fi
  while read -r name; do
    [[ $name =~ $DRIVER_LIBS ]] && continue
    path=$(awk -v n="$name" '$1 == n && $2 == "=>" { print $3 }' <<< "$map" | head -1)
    [ -n "$path" ] && [ "$path" != not ] || continue
    case $path in "$prefix"/*) continue ;; esac
    # (not "pkg=$(owner ...)": the cache must outlive the call, so no subshell)
    owner "$path" > /dev/null || true
    pkg=${owners[$path]}
    if [ -n "$pkg" ]; then
      needed_by[$pkg]+=" ${f#"$prefix"/}"
    else
      echo "check-runtime-packages: ${f#"$prefix"/} needs $path, which no package owns" >&2
      status=1
    fi
  done < <(readelf -d "$f" 2> /dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

for pkg in $(printf '%s\n' "${!needed_by[@]}" | sort); do
  [[ $BASE_PACKAGES == *" $pkg "* || $listed == *" $pkg "* ]] && continue
  by=$(tr ' ' '\n' <<< "${needed_by[$pkg]}" | sort -u | head -3 | xargs)
  echo "check-runtime-packages: $pkg is not in $list (needed by: $by)" >&2
  status=1
done
if ((status == 0)); then
  echo "check-runtime-packages: $list covers the ${#files[@]} files of $prefix" \
    "($(printf '%s\n' "${!needed_by[@]}" | sort | xargs))"
fi
exit $status
