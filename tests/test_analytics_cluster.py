"""Cluster mode (TALLY_ANALYTICS_CLUSTER): the analytics tests that compare the reads with PostgreSQL, and
those of rebuilds and of stores converted as they open, run again on a store of Distributed tables over
local ones (tests/conftest.py's two-shard cluster of the run's chDB, on which a read sent to both shards
counts twice). The tests are those of their own modules, collected here a second time, with `client`
serving from the cluster's store."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from app.server import init_app
from app.settings import Settings
from storage.clickhouse import AnalyticsStore
from tests.test_analytics_breakdown import (  # noqa: F401 (collected here again)
    site,
    test_breakdown_by_entry_and_exit_page,
    test_filters_on_the_overview,
    test_goals_in_breakdowns_and_filters,
)
from tests.test_analytics_days import (  # noqa: F401
    test_a_late_event_in_a_counted_day_is_counted,
    test_a_window_ending_inside_a_day_holds_none_of_its_later_events,
    test_day_tables_from_before_their_one_row_granules_are_made_again,
    test_rebuild_since_a_day_keeps_the_day_rows_exact,
    test_unfiltered_overviews_match_the_events,
    test_visits_across_midnight_come_from_the_day_rows_exactly,
)
from tests.test_analytics_engine import (  # noqa: F401
    test_a_batch_written_twice_counts_once,
    test_erasure_removes_the_user_from_every_analytics_read,
    test_every_site_aggregate_matches_postgresql,
    test_keyed_event_volume_matches_postgresql,
)
from tests.test_analytics_sessions import (  # noqa: F401
    test_a_store_from_before_the_codecs_gets_them_with_the_same_answers,
    test_a_store_sorted_the_old_way_is_re_sorted_with_the_same_rows_and_answers,
    test_matching_sessions_found_by_marked_rows_are_those_of_the_set,
    test_rebuild_since_the_middle_of_a_day_keeps_sessions_exact,
    test_sessions_crossing_midnight_and_the_window_edges_match_postgresql,
)
from tests.test_analytics_visits import (  # noqa: F401
    test_a_window_ending_inside_a_day_leaves_out_its_later_events,
    test_entry_and_exit_pages_match_postgresql,
)
from tests.test_reports_engine import data, test_reports_match_a_direct_computation_and_ignore_copied_events  # noqa: F401


@pytest.fixture
async def client(aiohttp_client, settings: Settings, cluster_store: AnalyticsStore) -> TestClient:
    return await aiohttp_client(init_app(settings, analytics=cluster_store))

