"""The recipe table's types: recipes/recipes.toml is parsed once into them, every rule checked at load
time, and code further down (stacks, manifests, the CLI) only reads their derived properties.

- recipe.py: Recipe, the typed recipe everything downstream reads, and build_recipes;
- entry.py: one [recipes.<name>] table as written and the rules each section checks alone; the steps;
- shape.py: a TPU slice's shape, with its chips and hosts derived once;
- facts.py: what recipes run on: TPU generations, machine sizes, MaxText releases, source patches;
- strict.py: the base of every table: an unknown key is refused and a parsed table is frozen;
- said.py: a validation error in our own words: the field, what it takes, the value it got.
"""
