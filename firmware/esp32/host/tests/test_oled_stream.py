"""The SSD1306 and SH1106 command streams: what lib/oled sends through its transport, and the
simulator that decodes it back into what each panel shows.

The datasheet facts checked here (SSD1306 Rev 1.1: 8.1.5 I2C, 10.1.x commands, the charge pump
note; SH1106 V2.3: its command table, 132 RAM columns with the glass on 2..129) are restated in
this file; the decoded screen is compared with the framebuffer the firmware drew, so any wrong
byte, order, window or column offset shows up as a different picture.
"""

from __future__ import annotations

import random

import pytest
import simlib

ADDR = simlib.I2C_ADDR


def random_fb(seed: int) -> bytes:
    return random.Random(seed).randbytes(simlib.FB_BYTES)


CONTROLLERS = [pytest.param(simlib.SSD1306, id="ssd1306"), pytest.param(simlib.SH1106, id="sh1106")]


def replay(lib, writes, addr: int = ADDR, controller: int = simlib.SSD1306):
    """Feed captured I2C writes to a fresh simulated panel; return it."""
    panel = simlib.new_panel(lib, addr, controller)
    for a, data in writes:
        assert lib.gs_sim_panel_i2c_write(panel, a, data, len(data)) == 0
    return panel


def commands_of(writes) -> bytes:
    return b"".join(data[1:] for _, data in writes if data[0] == 0x00)


def test_every_write_is_one_control_byte_and_a_bounded_payload(lib):
    cap = simlib.Capture()
    dev = cap.device()
    fb = simlib.framebuffer(random_fb(1))
    assert lib.oled_init(dev) == 0
    assert lib.oled_flush(dev, fb) == 0
    assert lib.oled_flush_pages(dev, fb, 0b1010_0001) == 0
    assert cap.writes
    for addr, data in cap.writes:
        assert addr == 0x3C  # SA0 low (8.1.5)
        assert data[0] in (0x00, 0x40)  # Co = 0; D/C# = 0 commands, 1 data
        assert 2 <= len(data) <= 1 + 64  # fits Arduino's 128-byte Wire buffer


def test_init_enables_charge_pump_before_display_on(lib):
    cap = simlib.Capture()
    assert lib.oled_init(cap.device()) == 0
    cmds = commands_of(cap.writes)
    assert cmds[0] == 0xAE and cmds[-1] == 0xAF  # configured while off, switched on last
    assert cmds.find(bytes([0x8D, 0x14])) != -1  # charge pump on (A[2] = 1)
    for sequence in ([0xA8, 0x3F], [0x20, 0x02], [0xDA, 0x12], [0xA1], [0xC8], [0xA4], [0xA6]):
        assert cmds.find(bytes(sequence)) != -1, f"{bytes(sequence).hex()} missing"


def test_sh1106_init_uses_its_own_commands(lib):
    """SH1106: DC-DC on (ADh 8Bh) before display on; none of the SSD1306-only commands (8Dh,
    20h-22h, 2Eh), which the simulated SH1106 would reject."""
    cap = simlib.Capture()
    assert lib.oled_init(cap.device(controller=simlib.SH1106)) == 0
    cmds = commands_of(cap.writes)
    assert cmds[0] == 0xAE and cmds[-1] == 0xAF
    assert cmds.find(bytes([0xAD, 0x8B])) != -1
    panel = replay(lib, cap.writes, controller=simlib.SH1106)  # rejects SSD1306-only commands
    assert lib.gs_sim_capi_panel_errors(panel) == 0, simlib.panel_error(lib, panel)


@pytest.mark.parametrize("controller", CONTROLLERS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_captured_stream_decodes_to_the_framebuffer(lib, seed, controller):
    fb = simlib.framebuffer(random_fb(seed))
    cap = simlib.Capture()
    dev = cap.device(controller=controller)
    assert lib.oled_init(dev) == 0
    assert lib.oled_flush(dev, fb) == 0
    panel = replay(lib, cap.writes, controller=controller)
    assert lib.gs_sim_capi_panel_errors(panel) == 0, simlib.panel_error(lib, panel)
    assert simlib.panel_view(lib, panel) == bytes(fb)
    assert lib.gs_sim_capi_panel_data_bytes(panel) == 1024


def test_page_writes_start_at_the_controllers_first_shown_column(lib):
    """Page addressing for both: B0h | page, then the start column as low / high nibble
    commands: 0 on the SSD1306, 2 on the SH1106 (its 132-column RAM shows 2..129)."""
    for controller, column in ((simlib.SSD1306, 0), (simlib.SH1106, simlib.SH1106_COLUMN_OFFSET)):
        cap = simlib.Capture()
        assert (
            lib.oled_flush_pages(
                cap.device(controller=controller), simlib.framebuffer(), 0b1000_0100
            )
            == 0
        )
        cmds = [d[1:] for _, d in cap.writes if d[0] == 0x00]
        assert cmds == [bytes([0xB0 | page, column & 0x0F, 0x10 | column >> 4]) for page in (2, 7)]


def test_each_controller_needs_its_own_stream(lib):
    """Sent to the other controller, a stream shows a different picture (2 columns off) and
    holds a command that controller does not have."""
    fb = simlib.framebuffer(random_fb(6))
    for sent, shown in ((simlib.SSD1306, simlib.SH1106), (simlib.SH1106, simlib.SSD1306)):
        cap = simlib.Capture()
        dev = cap.device(controller=sent)
        lib.oled_init(dev)
        lib.oled_flush(dev, fb)
        panel = replay(lib, cap.writes, controller=shown)
        assert simlib.panel_view(lib, panel) != bytes(fb)
        assert lib.gs_sim_capi_panel_errors(panel) > 0  # 8Dh / ADh: the other one's command


def test_partial_flush_updates_only_its_pages(lib):
    before, after = random_fb(4), random_fb(5)
    cap = simlib.Capture()
    dev = cap.device()
    lib.oled_init(dev)
    lib.oled_flush(dev, simlib.framebuffer(before))
    mark = len(cap.writes)
    mask = 0b0100_0110
    assert lib.oled_flush_pages(dev, simlib.framebuffer(after), mask) == 0
    sent = sum(len(d) - 1 for _, d in cap.writes[mark:] if d[0] == 0x40)
    assert sent == 3 * 128
    expected = bytearray(before)
    for page in range(8):
        if mask >> page & 1:
            expected[page * 128 : (page + 1) * 128] = after[page * 128 : (page + 1) * 128]
    panel = replay(lib, cap.writes)
    assert simlib.panel_view(lib, panel) == bytes(expected)


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_console_through_the_whole_screen_path(lib, controller):
    """gs_sim_screen: console -> oled_flush_pages -> simulated panel, text split at every byte."""
    screen = simlib.opaque(lib.gs_sim_capi_sizeof_screen())
    lib.gs_sim_screen_init(screen, controller)
    text = "To be, or not to be, that is the question: caf\u00e9 \u20ac5\n" * 3
    for byte in text.encode():
        lib.gs_sim_screen_write(screen, bytes([byte]), 1)
    fb = bytes(lib.gs_sim_capi_screen_fb(screen)[: simlib.FB_BYTES])
    panel = lib.gs_sim_capi_screen_panel(screen)
    assert lib.gs_sim_capi_panel_errors(panel) == 0, simlib.panel_error(lib, panel)
    view = simlib.framebuffer()
    lib.gs_sim_panel_view(panel, view)
    assert bytes(view) == fb and any(fb)


def test_transport_error_stops_and_is_returned(lib):
    cap = simlib.Capture(fail_at=0, status=7)
    assert lib.oled_init(cap.device()) == 7 and cap.writes == []
    cap = simlib.Capture(fail_at=3, status=-2)
    assert lib.oled_flush(cap.device(), simlib.framebuffer()) == -2
    assert len(cap.writes) == 3  # nothing sent after the failure


def test_contrast_and_display_off(lib):
    cap = simlib.Capture()
    dev = cap.device()
    lib.oled_init(dev)
    lib.oled_flush(dev, simlib.framebuffer(b"\xff" * 1024))
    assert lib.oled_set_contrast(dev, 0x10) == 0
    assert cap.writes[-1][1] == bytes([0x00, 0x81, 0x10])
    assert lib.oled_display_on(dev, 0) == 0
    assert simlib.panel_view(lib, replay(lib, cap.writes)) == bytes(1024)  # sleeping: dark
    lib.oled_display_on(dev, 1)
    assert simlib.panel_view(lib, replay(lib, cap.writes)) == b"\xff" * 1024


# ---- the simulator on hand-written streams (datasheet behaviour, not lib/oled's) ------------


def cmd(*b: int) -> bytes:
    return bytes([0x00, *b])


def data(*b: int) -> bytes:
    return bytes([0x40, *b])


ON = [cmd(0x8D, 0x14, 0xA1, 0xC8, 0xAF)]  # pump on, upright module, display on


def view_after(lib, writes) -> bytes:
    panel = replay(lib, [(ADDR, w) for w in writes])
    assert lib.gs_sim_capi_panel_errors(panel) == 0, simlib.panel_error(lib, panel)
    return simlib.panel_view(lib, panel)


def test_sim_page_addressing_is_the_reset_mode(lib):
    # 10.1.3: after reset, page mode; B2h selects page 2, 03h/10h column 3.
    view = view_after(lib, ON + [cmd(0xB2, 0x03, 0x10), data(0xAA, 0x55)])
    expected = bytearray(1024)
    expected[2 * 128 + 3], expected[2 * 128 + 4] = 0xAA, 0x55
    assert view == bytes(expected)


def test_sim_vertical_addressing_and_windows(lib):
    # 10.1.3 vertical mode: the page pointer moves first, inside the 21h/22h window.
    view = view_after(lib, ON + [cmd(0x20, 0x01, 0x21, 10, 11, 0x22, 6, 7), data(1, 2, 3, 4, 5)])
    expected = bytearray(1024)
    expected[6 * 128 + 10], expected[7 * 128 + 10] = 1, 2
    expected[6 * 128 + 11], expected[7 * 128 + 11] = 3, 4
    expected[6 * 128 + 10] = 5  # the window wrapped to its start
    assert view == bytes(expected)


def test_sim_single_byte_control_and_split_commands(lib):
    # 8.1.5.1: Co = 1 sends one byte per control byte; a command's parameters may follow in a
    # later transaction.
    writes = [
        cmd(0x8D),
        cmd(0x14),
        bytes([0x80, 0xA1, 0x80, 0xC8, 0x80, 0xAF]),
        cmd(0x20, 0x00, 0x21),
        cmd(0, 127, 0x22, 0, 7),
        bytes([0xC0, 0xFF, 0x40, 0x01, 0x02]),
    ]
    view = view_after(lib, writes)
    expected = bytearray(1024)
    expected[0:3] = b"\xff\x01\x02"
    assert view == bytes(expected)


def test_sim_orientation_and_dark_states(lib):
    pixel = [cmd(0x20, 0x00, 0x21, 0, 127, 0x22, 0, 7), data(0x01)]  # pixel (0, 0) in RAM
    assert view_after(lib, ON + pixel)[0] == 0x01
    mirrored = view_after(lib, [cmd(0x8D, 0x14, 0xAF)] + pixel)  # no A1h/C8h: rotated 180
    assert mirrored[7 * 128 + 127] == 0x80 and sum(mirrored) == 0x80
    assert view_after(lib, [cmd(0xA1, 0xC8, 0xAF)] + pixel) == bytes(1024)  # no charge pump
    assert view_after(lib, [cmd(0x8D, 0x14, 0xA1, 0xC8)] + pixel) == bytes(1024)  # display off
    assert view_after(lib, ON + [cmd(0xA5)]) == b"\xff" * 1024  # entire display on
    inverted = view_after(lib, ON + pixel + [cmd(0xA7)])
    assert inverted[0] == 0xFE and inverted[1:] == b"\xff" * 1023


def test_sim_nacks_other_addresses_and_reports_bad_streams(lib):
    panel = simlib.new_panel(lib)
    assert lib.gs_sim_panel_i2c_write(panel, 0x3D, cmd(0xAF), 2) == -1
    assert lib.gs_sim_capi_panel_transactions(panel) == 0
    assert lib.gs_sim_panel_i2c_write(panel, ADDR, cmd(0xFF), 2) == 0
    assert lib.gs_sim_capi_panel_errors(panel) == 1
    assert "unknown command (0xFF)" in simlib.panel_error(lib, panel)
    for bad in (bytes([0x01, 0xAF]), b"", bytes([0x00])):
        panel = simlib.new_panel(lib)
        lib.gs_sim_panel_i2c_write(panel, ADDR, bad, len(bad))
        assert lib.gs_sim_capi_panel_errors(panel) == 1


def test_sim_sh1106_shows_ram_columns_2_to_129(lib):
    """SH1106: with A1h glass x shows RAM column x + 2, without it 129 - x; columns 0, 1, 130
    and 131 are off the glass; the DC-DC off (ADh 8Ah) darkens it; a write past column 131 and
    SSD1306-only commands are stream errors."""
    on = cmd(0xA1, 0xC8, 0xAF)  # the DC-DC is on from power-on

    def view(writes, errors=0):
        panel = replay(lib, [(ADDR, w) for w in writes], controller=simlib.SH1106)
        assert lib.gs_sim_capi_panel_errors(panel) == errors, simlib.panel_error(lib, panel)
        return simlib.panel_view(lib, panel)

    row = bytes(range(1, 133))  # 132 distinct bytes for RAM columns 0 .. 131 of page 3
    shown = view([on, cmd(0xB3, 0x00, 0x10), data(*row)])
    assert shown[3 * 128 : 4 * 128] == row[2:130] and shown.count(0) == 1024 - 128
    mirrored = view([cmd(0xC8, 0xAF), cmd(0xB3, 0x00, 0x10), data(*row)])
    assert mirrored[3 * 128 : 4 * 128] == bytes(reversed(row[2:130]))
    assert view([on, cmd(0xAD, 0x8A), cmd(0xB3, 0x00, 0x10), data(*row)]) == bytes(1024)
    view([on, cmd(0xB3, 0x03, 0x18), data(1, 2)], errors=1)  # column 131 + 1
    view([on, cmd(0x8D, 0x14)], errors=1)  # 8Dh: unknown, 14h: a column
