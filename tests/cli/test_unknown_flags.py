"""A misspelled flag is refused by its subcommand, with the flags it resembles and a short usage."""

from __future__ import annotations

import pytest

from tuner.cli import main


@pytest.mark.parametrize("argv, hint", [
    (["tune", "--space", "demo", "--n-trails", "5"], "--n-trails: did you mean --n-trials?"),
    (["buckets", "--release", "gaudi-main", "--max-num-seqs", "8", "--max-model-len", "1024",
      "--max-num-batched-tokens", "2048", "--max-model-lenght", "1024"], "did you mean --max-model-len"),
    (["explain", "x.log", "--model-shpe=llama-3.1-8b"], "did you mean --model-shape"),
])
def test_a_misspelled_flag_names_the_flag_it_resembles(capsys, argv, hint):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert hint in err and f"usage: bucket-tuner {argv[0]} [options]" in err
    assert len(err.splitlines()) == 2  # not fifty lines of usage
