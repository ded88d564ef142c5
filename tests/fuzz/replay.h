/* The replay driver both fuzz harnesses share, built with -DFUZZ_REPLAY where libFuzzer is not linked: it runs
 * LLVMFuzzerTestOneInput on each input file named on the command line, as the fuzzer would. */
#ifndef AIOTB_FUZZ_REPLAY_H
#define AIOTB_FUZZ_REPLAY_H

#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Replays the inputs named on the command line; exits non-zero (abort) on the first violation.
int main(int argc, char **argv)
{
    int replayed = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 2;
        }
        static uint8_t buffer[1 << 20];
        size_t size = fread(buffer, 1, sizeof buffer, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buffer, size);
        replayed++;
    }
    printf("replayed %d inputs\n", replayed);
    return 0;
}

#endif
