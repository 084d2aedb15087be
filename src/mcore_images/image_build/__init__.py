"""Making the images: the bake invocation and its guard, the Dockerfile held to the catalogue, the compile-job
planner, the mirror-only base, build timing, rebuilding a digest, and the generated regions of hand-written
files. Imports the catalogue, resolve and launch."""
