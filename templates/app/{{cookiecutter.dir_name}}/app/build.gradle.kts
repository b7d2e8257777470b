plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "{{ cookiecutter.package | kt }}"
    compileSdk = 35

    defaultConfig {
        applicationId = "{{ cookiecutter.package | kt }}"
        minSdk = 24
        targetSdk = 35
        versionCode = 1
        versionName = "1.0"
    }

    buildTypes {
        release {
            isMinifyEnabled = false
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }

    kotlinOptions {
        jvmTarget = "17"
    }
}

// The screen: ComponentActivity, a ViewModel holding its state (a StateFlow) across rotations, and coroutines for
// the work off the main thread (qnndeploy/data/maven.json has each version's source).
dependencies {
{%- for library in cookiecutter.data.app_libraries %}
    implementation("{{ library | kt }}")
{%- endfor %}
}

// The qnndeploy glue: ABI filter, jniLibs packaging, the bundle's assets, the QNN runtime and ONNX Runtime, all
// from the repositories of settings.gradle.kts (mavenCentral). ONNX Runtime (scaffold --ort-aar chooses the AAR):
// {{ cookiecutter.data.ort_pins | comment }}
apply(from = "{{ cookiecutter.glue_dir | kt }}/qnndeploy.gradle")
