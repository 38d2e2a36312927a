from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sharedstream.triggerer.loading import WatcherLoadError, load_watcher_module

HEADER = '''
from sharedstream import Asset, AssetWatcher, BaseEventTrigger

class T(BaseEventTrigger):
    def __init__(self, topic="a"):
        self.topic = topic
    def serialize(self):
        return (f"{type(self).__module__}.T", {"topic": self.topic})
'''


def write(tmp_path: Path, body: str, name: str = "watchers.py") -> str:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


def test_collects_module_level_assets_and_lists(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        a = Asset("a", watchers=[AssetWatcher("wa", T())])
        more = [Asset("b", watchers=[AssetWatcher("wb", T("b"))]), a]
        registry = {"c": Asset("c", uri="s3://bucket/c", watchers=[AssetWatcher("wc", T())])}
    ''')
    module = load_watcher_module(target)
    assert [a.name for a in module.assets] == ["a", "b", "c"]
    assert [w.name for w in module.watchers()] == ["wa", "wb", "wc"]
    assert [w.asset.name for w in module.watchers()] == ["a", "b", "c"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WatcherLoadError, match=r"watcher module not found: .*nope\.py"):
        load_watcher_module(str(tmp_path / "nope.py"))


def test_missing_dotted_module() -> None:
    with pytest.raises(WatcherLoadError, match=r"watcher module not found: no_such_mod\.sub"):
        load_watcher_module("no_such_mod.sub")


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    target = write(tmp_path, "\nx = (\n")
    with pytest.raises(WatcherLoadError, match=r"watchers.py:\d+: syntax error"):
        load_watcher_module(target)


def test_import_error_names_location(tmp_path: Path) -> None:
    target = write(tmp_path, "\nraise RuntimeError('bad config')\n")
    with pytest.raises(WatcherLoadError, match=r"import failed at .*watchers.py:\d+: "
                                                r"RuntimeError: bad config"):
        load_watcher_module(target)


def test_no_assets(tmp_path: Path) -> None:
    with pytest.raises(WatcherLoadError, match="no Asset found"):
        load_watcher_module(write(tmp_path, "x = 1\n"))


def test_asset_without_watchers(tmp_path: Path) -> None:
    with pytest.raises(WatcherLoadError, match="asset 'lonely' has no watchers"):
        load_watcher_module(write(tmp_path, "a = Asset('lonely')\n"))


def test_duplicate_watcher_names_across_assets(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        a = Asset("a", watchers=[AssetWatcher("w", T())])
        b = Asset("b", watchers=[AssetWatcher("w", T())])
    ''')
    with pytest.raises(WatcherLoadError, match="'w' is used by asset 'a' and asset 'b'"):
        load_watcher_module(target)


def test_two_assets_same_name(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        a = Asset("a", watchers=[AssetWatcher("w1", T())])
        b = Asset("a", watchers=[AssetWatcher("w2", T())])
    ''')
    with pytest.raises(WatcherLoadError, match="two different assets are named 'a'"):
        load_watcher_module(target)


def test_unserialisable_trigger(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        class Lossy(BaseEventTrigger):
            def __init__(self, topic="a"):
                self.topic = topic
            def serialize(self):
                return (f"{type(self).__module__}.Lossy", {"topik": self.topic})
        a = Asset("a", watchers=[AssetWatcher("w", Lossy())])
    ''')
    with pytest.raises(WatcherLoadError, match="watcher 'w': trigger Lossy is not serialisable: "
                                                "TypeError"):
        load_watcher_module(target)


def test_group_conflict_is_a_load_error_naming_both_watchers(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        from sharedstream import KafkaSharedStreamTrigger
        a = Asset("a", watchers=[AssetWatcher("wa", KafkaSharedStreamTrigger(
            topics=["o"], dlq_topic="o.dlq"))])
        b = Asset("b", watchers=[AssetWatcher("wb", KafkaSharedStreamTrigger(
            topics=["o"], dlq_topic="other.dlq"))])
    ''')
    with pytest.raises(WatcherLoadError, match=r"watchers.py: watchers 'wa' and 'wb' share the "
                                                r"stream .* disagree on dlq_topic"):
        load_watcher_module(target)


def test_groups_are_checked_separately_and_filter_only_kwargs_agree(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        from sharedstream import KafkaSharedStreamTrigger

        class PaidOrders(KafkaSharedStreamTrigger):
            def __init__(self, *, min_amount=0, **kwargs):
                super().__init__(**kwargs)
                self.min_amount = min_amount
            def serialize(self):
                path, kwargs = super().serialize()
                return path, {**kwargs, "min_amount": self.min_amount}

        orders = Asset("orders", watchers=[
            AssetWatcher("all", KafkaSharedStreamTrigger(topics=["o"], dlq_topic="d")),
            AssetWatcher("paid", PaidOrders(topics=["o"], dlq_topic="d", min_amount=5)),
        ])
        # Another topic set is another group: its own dlq_topic is no conflict.
        refunds = Asset("refunds", watchers=[
            AssetWatcher("refunds", KafkaSharedStreamTrigger(topics=["r"], dlq_topic="r.dlq")),
            AssetWatcher("local", T()),
        ])
    ''')
    module = load_watcher_module(target)
    assert [w.name for w in module.watchers()] == ["all", "paid", "refunds", "local"]
