"""Check logic of the image tests: small functions that return a list of problems ([] = pass).

The tests under tests/image/<layer>/ assert that these lists are empty; test_negative.py calls the same
functions on deliberately broken images and asserts that they are not. What to expect comes from the
image's labels, env/stacks.json and the component catalogue, never from a list kept here."""
