"""The types and the keyword-alias decorator the generated methods (`_methods.py`) use."""
import functools
from typing import Union

# A JSON parameter: a dict or list (encoded), or JSON text as str or bytes.
Json = Union[dict, list, str, bytes]
# A string parameter: str (sent as UTF-8) or bytes.
Text = Union[str, bytes]


def old_names(**renamed):
    """Lets a method also take its parameters' C names (`spec_json=` for `spec=`) as keywords."""
    def wrap(method):
        @functools.wraps(method)
        def with_old_names(self, *args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{method.__name__}() got both {new!r} and its old name {old!r}")
                    kwargs[new] = kwargs.pop(old)
            return method(self, *args, **kwargs)
        return with_old_names
    return wrap
