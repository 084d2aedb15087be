#!/bin/sh
# Register the CUDA libraries of the pip `nvidia-*` packages with the dynamic loader, so that
# Transformer Engine finds libnccl, libcudnn and the CUDA runtime that torch itself uses (and not a
# different system copy: a cuDNN mismatch silently disables fused attention).
# CUDA 12's wheels ship versioned names only (libnvrtc.so.12); TE looks for the toolkit's unversioned
# ones (libnvrtc.so, libcurand.so) and, failing that, for cudart in a folder layout CUDA 12's wheels do not
# have, so `import transformer_engine` fails without a toolkit. Unversioned links to the wheels' libraries
# (in a folder of this image's own, registered too) let it find them as a toolkit's.
set -eu
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[ -d "$site/nvidia" ] || { echo "link-nvidia-libs: no pip nvidia packages; system libraries stay in use"; exit 0; }
conf=/etc/ld.so.conf.d/00-mcore-images-nvidia.conf
find "$site/nvidia" -mindepth 2 -maxdepth 3 -type d -name lib | sort >"$conf"
links=/usr/local/lib/mcore-images-nvidia
made=0
while read -r lib; do
  for versioned in "$lib"/lib*.so.[0-9]*; do
    [ -e "$versioned" ] || continue
    plain="$(basename "$versioned" | sed 's/\.so\..*/.so/')"
    if [ ! -e "$lib/$plain" ] && [ ! -e "$links/$plain" ]; then
      mkdir -p "$links"
      ln -s "$versioned" "$links/$plain"
      made=$((made + 1))
    fi
  done
done <"$conf"
[ "$made" -eq 0 ] || echo "$links" >>"$conf"
ldconfig
echo "link-nvidia-libs: $(wc -l <"$conf") folders registered, $made unversioned links"
