#!/bin/sh
# Give an emulated builder (linux/arm64 made on an x86_64 machine under QEMU) a C/C++ compiler that runs at
# the build machine's own speed: Debian's cross g++ for this builder's triplet, itself built for the build
# machine, from the stage the Dockerfile mounts at TOOLCHAIN (cross-gxx; empty when the builder is native,
# and then this does nothing). Under QEMU g++ is about ten times slower than native, which makes Transformer
# Engine's extension the longest step of an arm64 build.
# The toolchain's programs start natively in this root once their loader, their libraries and the cross
# target folder (/usr/<triplet>, whose linker scripts name absolute paths) are at the paths they were linked
# with. Those are the build machine's multiarch paths, which a Debian root of another architecture does
# not use, so they are linked in; nothing that exists is replaced. The cross compiler's default search
# paths are then this root's own /usr/include and /usr/lib/<triplet>: Python's headers, torch and the CUDA
# wheels are the target's. gcc, g++, cc, c++ and their triplet names in BIN call it (put BIN on PATH).
# Usage: cross-compiler.sh TOOLCHAIN BIN [ROOT]
#   prints "cross-compiler: …" and exits 0 when it set the compiler up, prints nothing when TOOLCHAIN has no
#   cross g++ for this machine, exits 1 when a path it needs already exists as something else.
set -eu
toolchain="$1" bin="$2" root="${3:-}"
triplet="$(uname -m)-linux-gnu"
[ -x "$toolchain/usr/bin/$triplet-g++" ] || exit 0

# Link ROOT/PATH to TOOLCHAIN/PATH: kept when it already is that link, refused when it is anything else.
link() {
  target="$toolchain/$1" at="$root/$1"
  if [ -L "$at" ] && [ "$(readlink "$at")" = "$target" ]; then return 0; fi
  if [ -e "$at" ] || [ -L "$at" ]; then
    echo "cross-compiler: $at exists and is not $target; build this platform without the cross compiler" \
      "(an empty cross-gxx stage) or on a native builder" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$at")"
  ln -s "$target" "$at"
}

link "usr/$triplet"
for dir in "$toolchain"/usr/lib/*-linux-gnu; do
  name="$(basename "$dir")"
  [ "$name" = "$triplet" ] || link "usr/lib/$name"
done
# The build machine's ELF loader (x86_64: /lib64/ld-linux-x86-64.so.2) lives in usr/lib64.
if [ -d "$toolchain/usr/lib64" ]; then
  for loader in "$toolchain"/usr/lib64/*; do
    link "usr/lib64/$(basename "$loader")"
  done
  [ -e "$root/lib64" ] || [ -L "$root/lib64" ] || ln -s usr/lib64 "$root/lib64"
fi

# The path goes into the wrappers as one single-quoted word: refuse one that a quote would break.
case "$toolchain" in *"'"*) echo "cross-compiler: a toolchain path with a quote: $toolchain" >&2; exit 1 ;; esac
mkdir -p "$bin"
for name in gcc g++ cc c++ "$triplet-gcc" "$triplet-g++"; do
  case "$name" in
    *++) tool="$triplet-g++" ;;
    *) tool="$triplet-gcc" ;;
  esac
  printf "#!/bin/sh\nexec '%s' \"\$@\"\n" "$toolchain/usr/bin/$tool" > "$bin/$name"
  chmod 755 "$bin/$name"
done
echo "cross-compiler: $("$bin/g++" -dumpmachine) g++ $("$bin/g++" -dumpfullversion) from $toolchain" \
  "(runs natively) as gcc/g++/cc/c++ in $bin"
