"""Start-up error: an asset without watchers."""

from sharedstream import Asset

lonely = Asset("lonely", watchers=[])
