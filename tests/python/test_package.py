"""The Python package itself: installed with its metadata, generated signatures and methods,
result names, error objects."""
import ctypes
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys
import typing

import pytest

import kcsi
from kcsi import _signatures as sig
from conftest import REPO


def test_package_is_installed_with_the_librarys_version_and_its_type_marker():
    dist = importlib.metadata.distribution("kcsi")
    assert dist.version == kcsi.version()
    files = {str(f) for f in dist.files}
    assert "kcsi/py.typed" in files and "kcsi/_methods.py" in files, files
    # Imported from where pip put it, not from the checkout's bindings/python.
    assert os.path.samefile(os.path.dirname(kcsi.__file__), dist.locate_file("kcsi"))


def test_signatures_file_is_fresh_from_header():
    r = subprocess.run([sys.executable, os.path.join(REPO, "bindings/python/gen_signatures.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_header_function_has_explicit_restype_and_argtypes():
    assert kcsi.MISSING == [], f"libkcsi lacks header functions: {kcsi.MISSING}"
    for name, (ret, params, _doc) in sig.FUNCTIONS.items():
        fn = getattr(kcsi.lib, name)
        assert fn.argtypes is not None and len(fn.argtypes) == len(params), name
        # Never the default c_int: pointers would be truncated.
        if ret.endswith("*"):
            assert fn.restype not in (ctypes.c_int, ctypes.c_int32), name
        if ret == "void":
            assert fn.restype is None, name


def test_version_is_semver_text():
    parts = kcsi.version().split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)


def test_result_names_match_header_constants():
    for name, value in sig.CONSTANTS.items():
        if name == "KCSI_OK" or name.startswith("KCSI_ERR_"):
            assert kcsi.result_name(value) == name
    assert kcsi.result_name(999) == "KCSI_UNKNOWN_RESULT"
    assert kcsi.result_name(-1) == "KCSI_UNKNOWN_RESULT"


def test_each_result_code_has_an_exception_class():
    codes = [v for k, v in sig.CONSTANTS.items() if k.startswith("KCSI_ERR_")]
    assert sorted(kcsi.ERRORS) == sorted(codes)
    assert kcsi.ERRORS[kcsi.KCSI_ERR_NOT_FOUND] is kcsi.NotFound
    assert issubclass(kcsi.Timeout, kcsi.KcsiError)


def test_error_carries_result_class_grpc_code_and_message(host):
    with pytest.raises(kcsi.KcsiError) as e:
        host.deregister_plugin("nobody.example.com")
    err = e.value
    assert err.result == kcsi.KCSI_ERR_NOT_FOUND
    assert err.result_name == "KCSI_ERR_NOT_FOUND"
    assert err.grpc_code == -1
    assert err.error_class in (kcsi.KCSI_CLASS_FINAL, kcsi.KCSI_CLASS_TRANSIENT, kcsi.KCSI_CLASS_UNCERTAIN)
    assert "nobody.example.com" in err.message
    assert not kcsi.is_uncertain(ValueError())


def test_every_host_function_in_header_is_a_host_method(host):
    fns = [f for f, (_r, p, _d) in sig.FUNCTIONS.items()
           if p and p[0][0] == "kcsi_host *" and f != "kcsi_host_free"]
    assert "kcsi_register_plugin" in fns
    for f in fns:
        method = f[len("kcsi_host_"):] if f.startswith("kcsi_host_") else f[len("kcsi_"):]
        assert callable(getattr(host, method)), f
    with pytest.raises(AttributeError):
        host.no_such_function


def test_mismatched_handle_type_is_refused_by_ctypes(host):
    # A host pointer where a mounter is expected never reaches C.
    with pytest.raises(ctypes.ArgumentError):
        kcsi.lib.kcsi_mounter_path(host._ptr, None, None)


def test_embedded_nul_is_refused_before_reaching_c(host):
    # C would see only "a"; the package refuses instead of registering the wrong name.
    with pytest.raises(ValueError):
        host.validate_plugin("a\0b.example.com", "/tmp/x.sock", ["1.0.0"])


def test_methods_show_python_parameters_with_hints_and_defaults():
    new = inspect.signature(kcsi.Host.mounter)
    assert list(new.parameters) == ["self", "spec", "pod"]
    assert new.return_annotation == "Mounter"
    set_up = inspect.signature(kcsi.Mounter.set_up).parameters
    assert set_up["args"].default is None  # the header marks it Nullable
    assert set_up["args"].annotation == typing.Optional[kcsi._types.Json]
    register = inspect.signature(kcsi.Host.register_plugin).parameters
    assert register["timeout_ms"].default == 0 and register["timeout_ms"].annotation is int
    assert inspect.signature(kcsi.Host.can_attach).return_annotation is bool
    assert "NodePublishVolume" in kcsi.Mounter.set_up.__doc__
    assert inspect.signature(kcsi.Host.status).return_annotation is kcsi.HostStatus
    assert inspect.signature(kcsi.BlockMapper.paths).return_annotation is kcsi.BlockMapperPaths
    assert inspect.signature(kcsi.Mounter.metrics).return_annotation is kcsi.VolumeMetrics
    assert inspect.signature(kcsi.Host.list_drivers).return_annotation == typing.List[kcsi.DriverInfo]


def test_constructors_are_named_for_what_they_make_and_keep_their_c_names():
    for made in ("mounter", "unmounter", "block_mapper", "block_unmapper", "attacher"):
        assert getattr(kcsi.Host, made + "_new") is getattr(kcsi.Host, made), made


def test_docstrings_speak_python_not_c():
    c_only = re.compile(r"_out\b|kcsi_string_free|_free\b|\bNULL\b|KCSI_(OK|ERR_)|\b[a-z]+_json\b|\bconst char\b")
    classes = (kcsi.Host, kcsi.Mounter, kcsi.Unmounter, kcsi.Attacher, kcsi.BlockMapper, kcsi.BlockUnmapper)
    documented = set()
    for cls in classes:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if fn.__module__ != "kcsi._methods":
                continue
            body, c_name = inspect.getdoc(fn).rsplit("\n\nC function: ", 1)
            wrong = c_only.search(body)
            assert wrong is None, f"{cls.__name__}.{name}: {wrong.group(0)!r} in {body!r}"
            documented.add(c_name.rstrip("."))
    handles = {f"{cls._ctype} *" for cls in classes}
    methods = {f for f, (_r, params, _d) in sig.FUNCTIONS.items()
               if params and params[0][0] in handles and not f.endswith("_free")}
    assert documented == methods


def test_json_parameters_keep_their_c_names_as_keyword_aliases(host):
    spec = {"volume": {"name": "v", "csi": {"driver": "alias.example.com"}}}
    assert host.can_support(spec) is True
    assert host.can_support(spec=spec) is True
    assert host.can_support(spec_json=spec) is True
    assert host.can_device_mount(spec_json=spec) == host.can_device_mount(spec=spec)
    with pytest.raises(TypeError):
        host.can_support(spec=spec, spec_json=spec)


def test_nullable_parameters_come_from_the_header_not_prose():
    assert kcsi.NULLABLE["kcsi_mounter_set_up"] == ("args_json",)
    assert kcsi.nullable("kcsi_block_unmapper_tear_down_device", "device_path")
    assert not kcsi.nullable("kcsi_mounter_new", "pod_json")
    assert kcsi.nullable("kcsi_mounter_new", "err_out")
