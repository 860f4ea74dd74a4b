"""The tables of figures in docs/planner.md and docs/bench.md are generated from the code
(`python -m shardlab.plan.doctables`), and the docs hold what the code gives now."""
import pytest

from shardlab.plan import doctables


@pytest.mark.parametrize("doc", sorted(doctables.BLOCKS))
def test_docs_tables_match_what_the_code_gives(doc):
    text = (doctables.DOCS / doc).read_text()
    assert doctables.render(text, doc) == text, f"stale: run python -m shardlab.plan.doctables"


def test_every_generated_block_is_in_the_docs_and_holds_the_codes_figures():
    from shardlab.plan.presets import PRESETS
    from shardlab.plan.published import evaluate_published
    for doc, blocks in doctables.BLOCKS.items():
        text = (doctables.DOCS / doc).read_text()
        for name in blocks:
            assert f"<!-- generated: {name} -->" in text and f"<!-- end generated: {name} -->" in text
    planner = (doctables.DOCS / "planner.md").read_text()
    assert f"{PRESETS['gpt2'].params:,}" in planner  # 124,439,808
    for p in evaluate_published():
        assert f"{p['planner']:.4g} {p['unit']}" in planner
    bench = (doctables.DOCS / "bench.md").read_text()
    assert "| `seed000_payload_kib_mb1` | 838.8 | reproduced:" in bench and "not measured" in bench


def test_check_mode_reports_a_stale_table_and_rewrite_fixes_it(tmp_path, monkeypatch, capsys):
    for doc in doctables.BLOCKS:
        (tmp_path / doc).write_text((doctables.DOCS / doc).read_text())
    (tmp_path / "planner.md").write_text((tmp_path / "planner.md").read_text().replace("124,439,808", "124,000,000"))
    monkeypatch.setattr(doctables, "DOCS", tmp_path)
    assert doctables.main(["--check"]) == 1 and "stale" in capsys.readouterr().err
    assert doctables.main([]) == 0 and doctables.main(["--check"]) == 0
    assert "124,439,808" in (tmp_path / "planner.md").read_text()
