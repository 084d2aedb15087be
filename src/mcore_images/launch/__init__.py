"""Starting containers and programs: `docker run` the way NVIDIA's images ask, `mcore-images run`, the image's
programs (smoke, bridge, bench) here or in an image, the Kubernetes Job, and QEMU emulation for another
machine's images. Imports only the catalogue."""
