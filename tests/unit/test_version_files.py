"""Which state files loading one version reads, from names alone (what a snapshot of a job
in a remote home fetches)."""

from __future__ import annotations

from sparkpoint.checkpoint.version_files import files_for_version, is_state_data


def test_hdfs_provider_needs_the_newest_snapshot_at_or_below_and_the_deltas_after_it() -> None:
    files = [f"0/1/{v}.delta" for v in range(1, 9)] + ["0/1/4.snapshot", "0/1/8.snapshot",
                                                       "0/1/_metadata/schema", "_metadata/x"]
    assert files_for_version(files, 6) == {"0/1/4.snapshot", "0/1/5.delta", "0/1/6.delta",
                                           "0/1/_metadata/schema", "_metadata/x"}


def test_without_a_snapshot_every_delta_up_to_the_version() -> None:
    files = [f"1/0/{v}.delta" for v in range(1, 5)]
    assert files_for_version(files, 3) == {"1/0/1.delta", "1/0/2.delta", "1/0/3.delta"}


def test_rocksdb_needs_the_newest_zip_and_changelogs_after_it_and_no_sst_by_name() -> None:
    files = ["0/0/3.zip", "0/0/5.zip", "0/0/6.changelog", "0/0/7.changelog",
             "0/0/SSTs/000008-abc.sst", "0/0/metadata"]
    assert files_for_version(files, 7) == {"0/0/5.zip", "0/0/6.changelog", "0/0/7.changelog",
                                           "0/0/metadata"}


def test_each_store_directory_is_chosen_on_its_own() -> None:
    files = ["0/0/left-keyToNumValues/2.delta", "0/0/left-keyToNumValues/1.delta",
             "0/0/right-keyWithIndexToValue/2.snapshot", "0/0/right-keyWithIndexToValue/1.delta"]
    assert files_for_version(files, 2) == {"0/0/left-keyToNumValues/1.delta",
                                           "0/0/left-keyToNumValues/2.delta",
                                           "0/0/right-keyWithIndexToValue/2.snapshot"}


def test_state_data_is_keys_and_values_never_schemas_or_metadata() -> None:
    """What Spark's restart check may go without (it plans, loading no store)."""
    for rel in ["0/0/1.delta", "0/0/.1.delta.crc", "0/0/12.zip", "0/0/2.snapshot",
                "0/0/SSTs/000008-3f1c.sst", "1/2/left-keyToNumValues/3_5b2d-ab.changelog"]:
        assert is_state_data(rel), rel
    for rel in ["0/0/_metadata/schema", "0/_metadata/metadata", "0/_metadata/v2/3",
                "0/_stateSchema/default/0_4a1b", "0/0/left-keyToNumValues/_metadata/schema"]:
        assert not is_state_data(rel), rel
