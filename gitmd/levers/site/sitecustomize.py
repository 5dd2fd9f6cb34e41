"""gitmd's framework knobs for Python jobs, loaded through PYTHONPATH by a launch plan that holds
one of the GITMD_* variables below. It never breaks a job: nothing happens unless a variable asks,
nothing is imported that the job does not import itself (PyTorch is adjusted only when the job
imports it, through an import hook), every failure is swallowed, and the job's own sitecustomize
(if another is on the path) is still imported after this one.

  GITMD_CUDNN_BENCHMARK=1          torch.backends.cudnn.benchmark = True (the job's own setting,
                                   made later, stands)
  GITMD_DATALOADER_PIN_MEMORY=1    DataLoader(pin_memory=True) when the job did not say
  GITMD_DATALOADER_WORKERS=N       DataLoader(num_workers=N) when the job did not say
  GITMD_KEEP_CACHE=1               torch.cuda.empty_cache() keeps the cache (the caching allocator
                                   still frees cached blocks itself when an allocation would pass
                                   the device's memory or the process's memory fraction)
  GITMD_LIVE_FLAGS=1               the same hooks, switched while the job runs: each call asks
                                   gitmd's shim in the process (CUDA_INJECTION64_PATH, already
                                   loaded by the driver; never loaded from here) for the flag the
                                   daemon set (gitm_shim.h: GITM_KNOB_FLAG); no shim, no flag

With GITMD_SITE_REPORT naming a file (`gitmctl run` makes one for a plan that holds a knob, and
reads it when the job exits), each process appends "site" once it has imported PyTorch and the knobs
were put in place, and a knob's variable once that knob changed something in it (a DataLoader built
without the job's own choice, a cache kept; cuDNN's autotuner on to the process's exit without the
job setting it itself, said at that exit): a launch trial's runs
that adjusted PyTorch and changed nothing show that its lever cannot act in that program.

Kept compatible with old Pythons (3.6+): it runs inside whatever interpreter the job uses.
"""

import os
import sys

_said = set()
_REPORT = os.environ.get("GITMD_SITE_REPORT", "")  # as the process started (a job may unset it later)


def _report(what):
    """Append ``what`` to the launcher's report file, once per process (never fails the job)."""
    if not _REPORT or what in _said:
        return
    _said.add(what)
    try:
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(_REPORT, flags | getattr(os, "O_NONBLOCK", 0))
        try:
            os.write(fd, (what + "\n").encode())
        finally:
            os.close(fd)
    except Exception:
        pass


def _chain():
    """Import the next sitecustomize on sys.path (the job's or its environment's), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception:
        pass


def _pin_dataloader(torch_module):
    pin = os.environ.get("GITMD_DATALOADER_PIN_MEMORY") == "1"
    workers = os.environ.get("GITMD_DATALOADER_WORKERS", "")
    if not pin and not workers.isdigit():
        return
    try:
        import torch.utils.data as data

        cls = data.DataLoader
        original = cls.__init__

        def __init__(self, *args, **kwargs):
            if pin and "pin_memory" not in kwargs and len(args) < 8:
                kwargs["pin_memory"] = bool(torch_module.cuda.is_available())
                _report("GITMD_DATALOADER_PIN_MEMORY")
            if workers.isdigit() and "num_workers" not in kwargs and len(args) < 6:
                kwargs["num_workers"] = int(workers)
                _report("GITMD_DATALOADER_WORKERS")
            original(self, *args, **kwargs)

        __init__.__wrapped__ = original
        cls.__init__ = __init__
    except Exception:
        pass


FLAG_KEEP_CACHE = 1  # gitm_shim.h: GITM_FLAG_KEEP_CACHE


class _ShimFlags:
    """The flags gitmd's shim holds in this process, read through its exported gitm_shim_flag().
    The shim is looked up among the libraries already loaded (RTLD_NOLOAD): it comes with CUDA's
    initialisation, so until then (or without it) every flag reads 0."""

    def __init__(self, path):
        self.path = path
        self.read = None

    def get(self, flag):
        if self.read is None:
            if not self.path:
                return 0
            try:
                import ctypes

                lib = ctypes.CDLL(self.path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                read = lib.gitm_shim_flag
                read.restype = ctypes.c_uint64
                read.argtypes = [ctypes.c_uint32]
                self.read = read
            except OSError:  # not loaded yet (CUDA not initialised): ask again next time
                if not os.path.exists(self.path):
                    self.path = ""
                return 0
            except Exception:  # an older shim without flags: never again
                self.path = ""
                return 0
        try:
            return self.read(flag)
        except Exception:
            return 0


_flags = None


def _live_flags():
    global _flags
    if _flags is None and os.environ.get("GITMD_LIVE_FLAGS") == "1":
        _flags = _ShimFlags(os.environ.get("CUDA_INJECTION64_PATH", ""))
    return _flags


def _keep_cache(torch_module):
    fixed = os.environ.get("GITMD_KEEP_CACHE") == "1"
    live = _live_flags()
    if not fixed and live is None:
        return
    try:
        cuda = torch_module.cuda
        original = cuda.empty_cache

        def empty_cache():
            """gitmd (GITMD_KEEP_CACHE=1, or its live flag set): the cached blocks stay for the
            next allocations."""
            if not fixed and not live.get(FLAG_KEEP_CACHE):
                return original()
            _report("GITMD_KEEP_CACHE")

        empty_cache.__wrapped__ = original
        cuda.empty_cache = empty_cache
        if getattr(getattr(cuda, "memory", None), "empty_cache", None) is original:
            cuda.memory.empty_cache = empty_cache
    except Exception:
        pass


class _JobChoice:
    """The framework's own data descriptor for a flag (cuDNN's ``benchmark``, a ContextProp on
    torch.backends.cudnn's module class), wrapped to note that the job set the flag itself: its
    choice, which stands, and then gitmd's setting changed nothing."""

    def __init__(self, inner):
        self.inner = inner
        self.chosen = False

    def __get__(self, obj, cls=None):
        return self.inner.__get__(obj, cls)

    def __set__(self, obj, value):
        self.chosen = True
        self.inner.__set__(obj, value)


def _cudnn_benchmark(torch_module):
    """cuDNN's autotuner on from PyTorch's import. It changed something only where the job left the
    flag alone to its end (a job that sets it itself, to True or False, decides; gitmd's setting is
    then no change): said at the process's exit, once that is known."""
    cudnn = torch_module.backends.cudnn
    inner = type(cudnn).__dict__.get("benchmark")
    watch = None
    if inner is not None and hasattr(inner, "__set__") and hasattr(inner, "__get__"):
        watch = _JobChoice(inner)
        type(cudnn).benchmark = watch
        inner.__set__(cudnn, True)  # gitmd's, not the job's choice
    else:  # a plain attribute: a job's own True cannot be told from gitmd's
        cudnn.benchmark = True

    def said():
        try:
            if (watch is None or not watch.chosen) and cudnn.benchmark is True:
                _report("GITMD_CUDNN_BENCHMARK")
        except Exception:
            pass

    import atexit

    atexit.register(said)


def _adjust(torch_module):
    _report("site")  # the framework the knobs act on is here, and they are being put in place
    try:
        if os.environ.get("GITMD_CUDNN_BENCHMARK") == "1":
            _cudnn_benchmark(torch_module)
    except Exception:
        pass
    _pin_dataloader(torch_module)
    _keep_cache(torch_module)


class _TorchHook:
    """A meta path finder that lets torch import as usual, then adjusts it once."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # once, and never in the way of torch's own imports
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_adjust(module):
                exec_module(module)
                _adjust(module)

            loader.exec_module = exec_and_adjust
            return spec
        except Exception:
            return None


def _install():
    knobs = (
        "GITMD_CUDNN_BENCHMARK",
        "GITMD_DATALOADER_PIN_MEMORY",
        "GITMD_DATALOADER_WORKERS",
        "GITMD_KEEP_CACHE",
        "GITMD_LIVE_FLAGS",
    )
    wanted = [k for k in knobs if os.environ.get(k)]
    if not wanted:
        return
    if "torch" in sys.modules:
        _adjust(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchHook())


try:
    _install()
except Exception:
    pass
_chain()
