/*
 * What the kforge subcommands share: exit codes and the error printer. One file per
 * subcommand group; main.c dispatches.
 */
#ifndef KFORGE_CLI_H
#define KFORGE_CLI_H

#include "kforge/core.h"

#define KF_EXIT_VERIFY 1
#define KF_EXIT_USAGE 2
#define KF_EXIT_INTERNAL 3

/* Print e to stderr as "kforge: ..." and return its exit code (2 for user errors, 3 else). */
int kf_cli_error(const kf_error *e);
/* Flag values (main.c), strict: the whole text, in range, no overflow. 1 when valid.
 * kf_cli_int: a decimal integer in [lo, hi]. kf_cli_seed: any 64-bit integer, negative ones
 * taken modulo 2^64. kf_cli_seconds: a finite number > 0. */
int kf_cli_int(const char *s, long long lo, long long hi, long long *out);
int kf_cli_seed(const char *s, uint64_t *out);
int kf_cli_seconds(const char *s, double *out);
int kf_cli_calibrate(int argc, char **argv);
int kf_cli_analyze(int argc, char **argv);
int kf_cli_import(int argc, char **argv); /* torch.c: the PyTorch commands */
int kf_cli_bench(int argc, char **argv);
int kf_cli_export(int argc, char **argv);
int kf_cli_runs(int argc, char **argv);   /* runs.c: browsing the store */
int kf_cli_show(int argc, char **argv);
int kf_cli_report(int argc, char **argv); /* report.c: a stored run as an HTML page */
int kf_cli_store(int argc, char **argv);  /* store.c: kforge store merge */
int kf_cli_slurm(int argc, char **argv);  /* torch.c: kforge slurm (kforge_torch.slurm) */
/* Open the store at flag_path (--store), else at the default path (kf_store_default_path)
 * into *s. create: a command that records (synth), which creates the store when absent
 * and says so on stderr; else a reading command, which creates nothing, refuses a missing
 * store and reads a read-only one. Returns 0, or the exit code after printing the error
 * (it names the path). */
struct kf_store;
int kf_cli_store_open(const char *flag_path, int create, struct kf_store **s);

#endif
