"""tpu-rl's one installed namespace: recipes, infra, stacks, jobs and scripts install as tpu_rl.<package>
(pyproject.toml maps each to its folder at the top of the repository), so that nothing named `scripts` or
`jobs` lands at the top of a user's site-packages."""

import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_CHECKOUT = _os.path.dirname(_HERE)
# In a checkout (or an editable install of one) the packages are the folders beside this one; the checkout's
# own files mark it. An installed copy holds them inside tpu_rl/ and never looks beside itself, where
# site-packages may hold someone else's `scripts`.
if (not _os.path.isdir(_os.path.join(_HERE, "scripts"))
        and _os.path.isfile(_os.path.join(_CHECKOUT, "pyproject.toml"))
        and _os.path.isfile(_os.path.join(_CHECKOUT, "cdktf.json"))):
    __path__.append(_CHECKOUT)
