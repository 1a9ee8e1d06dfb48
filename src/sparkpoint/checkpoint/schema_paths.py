"""transformWithState keeps absolute paths to its state schema files in its operator
metadata v2 (``state/<op>/_metadata/v2/<batch>``); a checkpoint copied, assembled or
renumbered elsewhere needs them pointed at its own schema files."""

from __future__ import annotations

import json
from pathlib import Path

from sparkpoint.checkpoint.operators import OperatorMetadata
from sparkpoint.storage.local import replace_file


def relocate_schema_paths(checkpoint_root: Path, final_root: Path | str | None = None) -> int:
    """Point every transformWithState operator's ``stateSchemaFilePaths`` (absolute URIs in
    its metadata v2 files) into ``final_root`` (default: where the checkpoint is now), at the
    operator's own directory. Spark reads schemas through these paths on restart, so a copied
    or renumbered checkpoint needs them rewritten. ``final_root`` may be the URL Spark is
    given as checkpointLocation (``s3a://...``, ``hdfs://...``) when the checkpoint is
    assembled here for a home in a store. Returns the number of files rewritten."""
    if isinstance(final_root, str):
        base = final_root.rstrip("/")
    else:
        base = "file:" + str((final_root or checkpoint_root).absolute())
    state = checkpoint_root / "state"
    rewritten = 0
    for v2_dir in sorted(state.glob("*/_metadata/v2")) if state.is_dir() else []:
        operator_id = v2_dir.parent.parent.name
        for path in sorted(p for p in v2_dir.iterdir() if p.name.isdigit()):
            metadata = OperatorMetadata.parse(path.read_bytes(), str(path))
            body = metadata.obj
            for store in body.get("stateStoreInfo", []):
                store["stateSchemaFilePaths"] = [
                    f"{base}/state/{operator_id}/_stateSchema/"
                    + old.split("/_stateSchema/", 1)[1]
                    for old in store.get("stateSchemaFilePaths", [])
                ]
            replace_file(path, OperatorMetadata(
                metadata.version, json.dumps(body, separators=(",", ":"))).to_bytes())
            rewritten += 1
    return rewritten
