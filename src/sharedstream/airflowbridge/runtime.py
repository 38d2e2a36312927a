"""Where the bridge's sink trigger finds its ``[airflow.<name>]`` instances.

The triggerer process registers the loader when it starts (it owns config
loading); the sink asks it when its filter starts. Kept here, not imported from
the triggerer, so the bridge stays below the process room.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sharedstream.airflowbridge.settings import AirflowInstanceSettings

InstancesLoader = Callable[[str | None], Mapping[str, AirflowInstanceSettings]]

_loader: InstancesLoader | None = None


def configure_airflow_instances(loader: InstancesLoader) -> None:
    """Set how ``[airflow.<name>]`` instances are read from a config path (None: default)."""
    global _loader
    _loader = loader


def airflow_instances(config_path: str | None) -> Mapping[str, AirflowInstanceSettings]:
    """The instances of ``config_path``; a LookupError outside a triggerer process."""
    if _loader is None:
        raise LookupError("Airflow instances are not configured: the sink trigger runs "
                          "inside `sharedstream run`")
    return _loader(config_path)
