"""What an image is made of, written once: the components, the stacks that pin them, the platforms, GPU
architectures and drivers they serve, image references and the tag scheme. Reads env/ offline; imports nothing
else of the project's but the shared modules (errors, command, jsonfiles, schemas)."""
