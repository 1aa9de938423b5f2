"""[sglang]: a value longer than one word of a command line (or one NAME=value of an environment) may be is refused
where the engine is built (config check), not at the exec: `config check` said ok, and the start failed with E2BIG
('Argument list too long'), exit 1, restarted by the unit for ever."""
import shutil
import subprocess
import sys

import pytest

from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine

# the exec by its own path: searched along PATH, an E2BIG there was reported as the EACCES of a folder on the way
# (a user other than root, root's PATH kept by runuser)
TRUE = shutil.which("true") or "/bin/true"

ARG_MOST = 131071        # Linux's MAX_ARG_STRLEN, its NUL aside (engines/sglang_flags.ARG_MOST)
SGLANG = {"model_path": "m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "d"}
LONG = "v" * (ARG_MOST + 10)


def test_a_word_that_long_is_what_the_exec_refuses():
    with pytest.raises(OSError, match="Argument list too long"):
        subprocess.run([sys.executable, "-c", "", LONG])      # (the exec itself refuses it)


@pytest.mark.parametrize("extra,key", [({"model_path": "/" + LONG}, "model_path"), ({"env": {"X": LONG}}, "env.X"),
                                       ({"extra_args": ["--x", LONG]}, "extra_args")])
def test_a_value_too_long_for_a_command_line_is_refused_where_the_engine_is_built(extra, key):
    with pytest.raises(EngineError) as err:
        SGLangEngine({**SGLANG, **extra})
    assert str(err.value) == (f"sglang engine: [sglang] {key} is longer than a command line's word or an "
                              f"environment's may be ({ARG_MOST:,} bytes)")


def test_config_check_refuses_it_in_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/{LONG}"\nspeculative_algorithm = "EAGLE3"\n'
                    f'speculative_draft_model_path = "d"\npython = "{sys.executable}"\n')
    done = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", "--config", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.splitlines() == ["spec-controller: sglang engine: [sglang] model_path is longer than a command "
                                        f"line's word or an environment's may be ({ARG_MOST:,} bytes)"], done.stderr


def test_an_extra_args_word_is_measured_as_the_word_it_is():
    """helper-145: extra_args' words were measured as extra_args=WORD, so one the exec takes (11 bytes short of the
    limit and up) was refused; one byte past the limit is still refused."""
    from controller.daemon.engines.sglang_flags import unfit_key
    longest = "--x=" + "v" * (ARG_MOST - 4)
    assert unfit_key({**SGLANG, "extra_args": ["--y", longest]}) is None
    subprocess.run([TRUE, longest], check=True)          # (what the exec takes)
    assert unfit_key({**SGLANG, "extra_args": [longest + "v"]})[0] == "extra_args"


def test_a_launch_too_large_as_a_whole_is_refused_where_the_engine_is_built(tmp_path):
    """helper-141's note: a million extra_args (each word short) ran config check's parser to its 300 s timeout, and
    the exec would have refused the launch (E2BIG). Measured with the environment against the kernel's ARG_MAX now."""
    from controller.daemon.engines.sglang_section import launch_size_reason
    many = ["--x"] * 1_000_000
    with pytest.raises(OSError, match="Argument list too long"):
        subprocess.run([TRUE, *many])                     # (the exec itself refuses it)
    assert "more than the kernel gives a new program" in launch_size_reason({**SGLANG, "extra_args": many})
    fits = ["--x"] * 50_000
    assert launch_size_reason({**SGLANG, "extra_args": fits}) is None
    subprocess.run([TRUE, *fits], check=True)             # (and the exec takes that one)
    path = tmp_path / "c.toml"
    words = ", ".join(['"--x"'] * 1_000_000)
    path.write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "EAGLE3"\n'
                    f'speculative_draft_model_path = "d"\npython = "{sys.executable}"\nextra_args = [{words}]\n')
    done = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", "--config", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert len(done.stderr.splitlines()) == 1 and "ARG_MAX" in done.stderr, done.stderr
