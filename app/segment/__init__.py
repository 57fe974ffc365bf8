"""The Segment HTTP Tracking API: Segment's SDKs send to Tally by changing only their host."""
