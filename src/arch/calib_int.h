/* Inside the calibration room (src/arch/): the device probes' measurement. */
#ifndef KF_ARCH_CALIB_INT_H
#define KF_ARCH_CALIB_INT_H

#include "kforge/calib.h"

/* Measure the ceilings of GPU-style backend b's device into *c (device_key already set):
 * copy, fill, FMA chain and empty-launch probes, compiled and timed through b. Nothing is
 * cached here. */
kf_status kf_calib_measure_device(kf_backend *b, kf_ceilings *c, kf_error *err);

#endif
