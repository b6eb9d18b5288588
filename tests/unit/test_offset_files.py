"""Offsets as files (issue 13): the export format of kafka-consumer-groups and the rpk seek file, parsed whole."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream_registry.errors import ConfigError
from stream_registry.model import PartitionOffsets
from stream_registry.offset_files import OffsetFileError, export_offsets, offsets_spec, parse_offsets_file


def _row(partition, committed, position=None):
    return PartitionOffsets(topic="orders", partition=partition, committed_offset=committed, position=position,
                            log_start_offset=0, log_end_offset=100, lag=None, assigned=position is not None)


def test_export_is_kafka_consumer_groups_csv_without_header():
    rows = [_row(0, 12, 15), _row(1, None, 3), _row(2, 40)]
    assert export_offsets(rows) == (["orders,0,12", "orders,2,40"], ["orders:1 has no committed offset; left out"])
    lines, notes = export_offsets(rows, "position")
    assert lines == ["orders,0,15", "orders,1,3"] and notes == [
        "orders:2 has no position (not held by the running stream); left out"]
    with pytest.raises(ConfigError, match="source: expected 'committed' or 'position', got 'lag'"):
        export_offsets(rows, "lag")


def test_both_file_forms_comments_blank_lines_crlf_and_a_bom():
    text = "\ufefforders,0,12\r\n\n# rpk's form below\norders 1 7\norders\t2\t0\n t.x-1 , 3 , 9 \n"
    assert parse_offsets_file(text) == {("orders", 0): 12, ("orders", 1): 7, ("orders", 2): 0, ("t.x-1", 3): 9}
    assert offsets_spec(parse_offsets_file("a,0,1\nb 2 3")) == {"a:0": 1, "b:2": 3}


def test_every_bad_line_is_named_by_number_and_nothing_is_returned():
    text = "orders,0,12\norders,0\norders,x,1\norders,1,-1\nbad topic!,0,1\norders,0,13\norders,2,1.5\nok 3 3\n"
    with pytest.raises(OffsetFileError) as info:
        parse_offsets_file(text, "offsets.csv")
    message = str(info.value)
    assert message.startswith("offsets.csv: line 2: expected 'topic,partition,offset' or 'TOPIC PARTITION OFFSET', "
                              "got 'orders,0'; line 3: partition 'x' is not a partition number; line 4: offset '-1' "
                              "is not an offset (an integer >= 0); line 5: topic 'bad topic!' is not a Kafka topic "
                              "name; line 6: orders:0 is already set on line 1 (and 1 more bad lines); nothing was "
                              "applied"), message
    assert isinstance(info.value, ConfigError)


@pytest.mark.parametrize("text", ["", "\n\n# only comments\n", "\ufeff"])
def test_a_file_naming_no_partition_is_refused(text):
    with pytest.raises(OffsetFileError, match="names no partition"):
        parse_offsets_file(text)


@pytest.mark.parametrize("line, what", [("o,0," + "9" * 20, "offset"), ("o,0,9223372036854775808", "offset"),
                                        ("o,2147483648,0", "partition"), ("o,٣,0", "partition"),
                                        ("o,0,²", "offset"), ("o," + "1" * 11 + ",0", "partition")])
def test_numbers_beyond_kafkas_ranges_are_bad_lines(line, what):
    with pytest.raises(OffsetFileError, match=f"line 1: {what} "):
        parse_offsets_file(line)


@given(st.dictionaries(st.tuples(st.from_regex(r"\A[A-Za-z0-9._-]{1,20}\Z"), st.integers(0, 2 ** 31 - 1)),
                       st.integers(0, 2 ** 63 - 1), min_size=1, max_size=20), st.booleans())
def test_an_export_reads_back_as_the_same_offsets(offsets, rpk):
    rows = [PartitionOffsets(topic=t, partition=p, committed_offset=o, position=None, log_start_offset=0,
                             log_end_offset=o, lag=0, assigned=False) for (t, p), o in offsets.items()]
    lines, notes = export_offsets(rows)
    text = "\n".join(line.replace(",", " ") if rpk else line for line in lines)
    assert notes == [] and parse_offsets_file(text) == offsets
